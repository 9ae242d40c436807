package gateway

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/audit"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/libs/testmcp"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/services/gateway/rest"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/tools/mcpbus/stack"
)

// startAudited is startMCP with a superuser beside the identities: the
// test reads the audit stream as mcpbus audit verify does and, to tamper
// with it, appends a forged record no identity could.
func startAudited(t *testing.T) (*mcpEnv, *nats.Conn, string) {
	t.Helper()
	logs := &testkit.LogBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("stack log (tail):\n%s", logs.Tail(12000))
		}
	})
	superUser, superOpt := testkit.Superuser(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	st, err := stack.Start(ctx, stack.Options{
		DataDir: dir, InProcessOnly: true, ExtraUsers: []*server.NkeyUser{superUser},
		Logger:  slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Runner:  runner.Options{StopGrace: 100 * time.Millisecond, StopTimeout: 3 * time.Second, StartTimeout: 30 * time.Second},
		Gateway: &gateway.Options{Addr: "127.0.0.1:0", ShutdownTimeout: 4 * time.Second},
	})
	if err != nil {
		t.Fatalf("starting the stack: %v", err)
	}
	t.Cleanup(st.Close)
	key, err := os.ReadFile(st.Gateway.AdminKeyPath())
	if err != nil {
		t.Fatal(err)
	}
	su, err := st.NATS.Connect(nats.Name("audit-superuser"), superOpt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(su.Close)
	return &mcpEnv{st: st, url: "http://" + st.Gateway.Addr(), admin: strings.TrimSpace(string(key)), logs: logs}, su, dir
}

// chainedEvents reads the audit stream and verifies it as mcpbus audit
// verify does (the writers' keys from the seeds mcpbus up keeps); it
// returns the report, the records as stored and each event by its subject.
func chainedEvents(t *testing.T, js jetstream.JetStream, dataDir string) (audit.Report, []audit.Entry, map[string][]json.RawMessage) {
	t.Helper()
	keys, err := audit.SeedKeys(filepath.Join(dataDir, "nats"))
	if err != nil || len(keys) == 0 {
		t.Fatalf("the writers' keys: %v (%d)", err, len(keys))
	}
	v := audit.NewVerifier(keys, audit.VerifyOptions{})
	var entries []audit.Entry
	fromStart, err := audit.ReadStream(ctxT(t, 30*time.Second), js, audit.From{}, 10*time.Second, func(e audit.Entry) {
		entries = append(entries, e)
		v.Add(e)
	})
	if err != nil {
		t.Fatal(err)
	}
	v.SetFromStart(fromStart)
	events := map[string][]json.RawMessage{}
	for _, e := range entries {
		var rec audit.Record
		if json.Unmarshal(e.Data, &rec) == nil {
			for _, ev := range rec.Events {
				events[ev.Subject] = append(events[ev.Subject], ev.Event)
			}
		}
	}
	return v.Report(), entries, events
}

// TestAuditOfReviewsAndGatewayEvents: a pin approval over REST and the
// gateway's key, token-revocation and approval-rules events land in the signed chains of
// the runner and the gateway, which verify; GET /api/v1/audit/verify reports
// every chain OK to an admin, refuses a non-admin, pages, and names a
// forged record in the gateway's chain as its first fault.
func TestAuditOfReviewsAndGatewayEvents(t *testing.T) {
	t.Parallel()
	e, su, dir := startAudited(t)
	js, err := jetstream.New(su)
	if err != nil {
		t.Fatal(err)
	}
	var me struct {
		KeyID string `json:"key_id"`
	}
	httpDo(t, "GET", e.url+"/api/v1/me", e.admin, nil).decode(t, &me)
	admin := "key:" + me.KeyID

	// A pin change approved over REST.
	cfg := remoteConfig("drift", testmcp.ServeServerHTTP(t, testmcp.NewDriftServer("drift"), nil, nil))
	cfg.Pin = model.PinStrict
	drift := e.enable(t, cfg)
	e.restart(t, drift)
	pending := e.waitPending(t, drift, "lookup")
	if r := httpDo(t, "POST", e.url+"/api/v1/servers/"+drift+"/pins/approve", e.admin, rest.PinDecision{Tool: "lookup", Hash: pending.Pending.Hash}); r.status != http.StatusOK {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}
	// The gateway's own events: a key made over REST, tokens revoked.
	r := httpDo(t, "POST", e.url+"/api/v1/keys", e.admin, model.KeyCreateRequest{Name: "caller", Scopes: []string{model.KeyScopeCall}})
	var caller model.KeyCreateReply
	r.decode(t, &caller)
	if r.status != http.StatusCreated && r.status != http.StatusOK {
		t.Fatalf("POST keys: %d %s", r.status, r.body)
	}
	if r := httpDo(t, "POST", e.url+"/api/v1/tokens/revoke", e.admin, model.TokenRevokeRequest{JTI: "token-1"}); r.status != http.StatusOK {
		t.Fatalf("revoke tokens: %d %s", r.status, r.body)
	}
	if r := httpDo(t, "PUT", e.url+"/api/v1/approvals/rules", e.admin, model.ApprovalRules{Default: model.ApprovalAllow}); r.status != http.StatusOK {
		t.Fatalf("PUT approval rules: %d %s", r.status, r.body)
	}

	// Each is in its writer's chain, and every chain verifies.
	var rep audit.Report
	var entries []audit.Entry
	var events map[string][]json.RawMessage
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
		rep, entries, events = chainedEvents(t, js, dir)
		gw := func(action string) int { return len(events["mcp.v1.events.gateway."+action]) }
		done := len(events["mcp.v1.events.tool_reviewed."+drift]) == 1 &&
			gw(model.GatewayKeyCreated) == 1 && gw(model.GatewayTokensRevoked) == 1 && gw(model.GatewayRulesChanged) == 1
		return done, strings.Join(subjectsOf(events), " ")
	})
	if !rep.OK() {
		t.Fatalf("the chains do not verify: %+v", rep.Problems)
	}
	var reviewed model.ToolReviewedEvent
	_ = json.Unmarshal(events["mcp.v1.events.tool_reviewed."+drift][0], &reviewed)
	if reviewed.Tool != "lookup" || reviewed.Decision != model.PinApproved || reviewed.Principal != admin ||
		reviewed.PinnedHash != pending.Hash || reviewed.NewHash != pending.Pending.Hash {
		t.Fatalf("chained tool_reviewed event %+v (pending %s -> %s, admin %s)", reviewed, pending.Hash, pending.Pending.Hash, admin)
	}
	var made, revoked, rules model.GatewayAuditEvent
	_ = json.Unmarshal(events["mcp.v1.events.gateway."+model.GatewayKeyCreated][0], &made)
	_ = json.Unmarshal(events["mcp.v1.events.gateway."+model.GatewayTokensRevoked][0], &revoked)
	_ = json.Unmarshal(events["mcp.v1.events.gateway."+model.GatewayRulesChanged][0], &rules)
	if made.KeyID != caller.ID || made.Principal != admin || revoked.RevokeValue != "token-1" || revoked.Principal != admin ||
		rules.Principal != admin || rules.Default != model.ApprovalAllow {
		t.Fatalf("chained gateway events: %+v, %+v, %+v", made, revoked, rules)
	}
	for subject, evs := range events {
		for _, ev := range evs {
			if strings.Contains(string(ev), caller.Key) {
				t.Fatalf("the new key's secret is in the chained event %s", subject)
			}
		}
	}
	chainOf := func(role string) string {
		for _, c := range rep.Chains {
			if strings.HasPrefix(c.Chain, role+".") {
				return c.Chain
			}
		}
		t.Fatalf("no %s chain in %+v", role, rep.Chains)
		return ""
	}
	gwChain := chainOf("gateway")
	chainOf("runner")

	// The endpoint: admins only.
	if r := httpDo(t, "GET", e.url+"/api/v1/audit/verify", caller.Key, nil); r.status != http.StatusForbidden {
		t.Fatalf("verify with a call key: %d %s", r.status, r.body)
	}
	verify := func(query string) rest.AuditVerifyReply {
		t.Helper()
		r := httpDo(t, "GET", e.url+"/api/v1/audit/verify"+query, e.admin, nil)
		var out rest.AuditVerifyReply
		r.decode(t, &out)
		if r.status != http.StatusOK {
			t.Fatalf("verify%s: %d %s", query, r.status, r.body)
		}
		return out
	}
	all := verify("")
	if !all.OK || !all.FromStart || all.Next != 0 || all.Records < len(entries) || len(all.Chains) != len(rep.Chains) {
		t.Fatalf("verify: %+v (the stream had %d records, %d chains)", all, len(entries), len(rep.Chains))
	}
	for _, c := range all.Chains {
		if !c.OK || c.Fault != nil || c.Writer == "" || c.Records == 0 || c.LastStreamSeq == 0 {
			t.Fatalf("chain %+v", c)
		}
	}
	if page := verify("?from=1&limit=1"); page.Records != 1 || page.Next != 2 || !page.OK {
		t.Fatalf("a page of one record: %+v", page)
	}
	if r := httpDo(t, "GET", e.url+"/api/v1/audit/verify?limit=0", e.admin, nil); r.status != http.StatusBadRequest || r.contract(t).Field != "limit" {
		t.Fatalf("limit=0: %d %s", r.status, r.body)
	}

	// A record appended to the gateway's chain by someone without its seed:
	// its chain's next number and link, another content, the old signature.
	var last audit.Record
	for _, en := range entries {
		var rec audit.Record
		if json.Unmarshal(en.Data, &rec) == nil && rec.Chain == gwChain && rec.Seq > last.Seq {
			last = rec
		}
	}
	forged := last
	forged.Seq, forged.Prev = last.Seq+1, last.Hash
	forged.Events = []audit.Event{{Subject: "mcp.v1.events.gateway." + model.GatewayKeyRevoked, Event: json.RawMessage(`{"action":"key_revoked","principal":"operator","key_id":"nobody"}`)}}
	data, _ := json.Marshal(forged)
	ack, err := js.Publish(ctxT(t, 10*time.Second), "mcp.v1.audit."+gwChain, data)
	if err != nil {
		t.Fatal(err)
	}
	bad := verify("")
	if bad.OK || bad.ProblemCount == 0 {
		t.Fatalf("verify after a forged record: %+v", bad)
	}
	for _, c := range bad.Chains {
		switch {
		case c.Chain == gwChain && (c.OK || c.Fault == nil || c.Fault.Kind != audit.Altered || c.Fault.StreamSeq != ack.Sequence || c.Fault.Seq != forged.Seq):
			t.Fatalf("the gateway's chain after the forgery: %+v (fault %+v), want altered at stream seq %d", c, c.Fault, ack.Sequence)
		case c.Chain != gwChain && !c.OK:
			t.Fatalf("chain %s is reported broken: %+v", c.Chain, c.Fault)
		}
	}
	if p := bad.Problems[0]; p.Chain != gwChain || p.StreamSeq != ack.Sequence {
		t.Fatalf("first problem %+v, want the forged record at %d", p, ack.Sequence)
	}
}

func subjectsOf(m map[string][]json.RawMessage) []string {
	var out []string
	for s := range m {
		out = append(out, s)
	}
	return out
}
