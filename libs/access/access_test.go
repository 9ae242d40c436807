package access

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/mcpbus/mcpbus/libs/model"
)

var update = flag.Bool("update", false, "rewrite deploy/nats/auth.conf from the table")

// TestRenderedConfigMatchesTable: deploy/nats/auth.conf is what the table
// renders (go test ./libs/access -update rewrites it).
func TestRenderedConfigMatchesTable(t *testing.T) {
	want, err := Render("mcp.v1", nil)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "..", "deploy", "nats", "auth.conf")
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("%s differs from the permission table: run go test ./libs/access -update", path)
	}
}

// TestLeastPrivilege spells out the rules the security design rests on.
func TestLeastPrivilege(t *testing.T) {
	perms := map[Role]Perms{}
	for _, r := range append(ServiceRoles(), Agent) {
		p, err := For(r, "mcp.v1", Inbox(string(r)))
		if err != nil {
			t.Fatal(err)
		}
		perms[r] = p
	}
	for role, p := range perms {
		if role != Runner && slices.Contains(p.Publish, "mcp.v1.cred.resolve") {
			t.Errorf("%s may request cred.resolve", role)
		}
		if role != Runner && slices.Contains(p.Subscribe, "mcp.v1.call.>") {
			t.Errorf("%s may subscribe to calls", role)
		}
		if role != Credential && slices.Contains(p.Subscribe, "mcp.v1.cred.*") {
			t.Errorf("%s may serve cred.*", role)
		}
		// The control plane: configs and agent identities for the operator
		// and the gateway (admin keys); keys.* the gateway serves, only the
		// operator requests it.
		for s, may := range map[string][]Role{
			"mcp.v1.config.*": {Operator, Gateway},
			"mcp.v1.agents.*": {Operator, Gateway},
			"mcp.v1.keys.*":   {Operator},
			"mcp.v1.tokens.*": {Operator},
		} {
			if slices.Contains(p.Publish, s) != slices.Contains(may, role) {
				t.Errorf("%s: publish %s is %v", role, s, slices.Contains(p.Publish, s))
			}
		}
		// Only gateways pass each other the retries of held calls: a
		// retry names the caller the holder checks it against.
		if slices.Contains(p.Publish, "mcp.v1.gateway.retry.*") != (role == Gateway) || slices.Contains(p.Subscribe, "mcp.v1.gateway.retry.*") != (role == Gateway) {
			t.Errorf("%s: gateway.retry.* publish %v, subscribe %v", role, slices.Contains(p.Publish, "mcp.v1.gateway.retry.*"), slices.Contains(p.Subscribe, "mcp.v1.gateway.retry.*"))
		}
		// A flow's callback (the authorization code, sealed) goes from one
		// gateway instance to another: no other identity may send or read it.
		if slices.Contains(p.Publish, "mcp.v1.oauth.callback.*") != (role == Gateway) || slices.Contains(p.Subscribe, "mcp.v1.oauth.callback.*") != (role == Gateway) {
			t.Errorf("%s: oauth.callback.* publish %v, subscribe %v", role, slices.Contains(p.Publish, "mcp.v1.oauth.callback.*"), slices.Contains(p.Subscribe, "mcp.v1.oauth.callback.*"))
		}
		// A confidential OAuth client's secret: the gateway alone reads it.
		if slices.Contains(p.Publish, "mcp.v1.cred.oauthclient") != (role == Gateway) {
			t.Errorf("%s: publish cred.oauthclient is %v", role, slices.Contains(p.Publish, "mcp.v1.cred.oauthclient"))
		}
		for _, s := range p.Publish {
			if role != Gateway && (s == "mcp.v1.>" || strings.HasPrefix(s, "mcp.v1.oauth.callback")) {
				t.Errorf("%s may publish %s", role, s)
			}
		}
		// The Mcpbus-Principal header of chat requests is trusted because
		// only the gateway (always setting it) and the operator request
		// chat.* (docs/principals.md); chat events are read only by the
		// chat service, the gateway and the operator.
		if slices.Contains(p.Publish, "mcp.v1.chat.*") != (role == Gateway || role == Operator) {
			t.Errorf("%s: publish chat.* is %v", role, slices.Contains(p.Publish, "mcp.v1.chat.*"))
		}
		readsEvents := slices.Contains(p.Subscribe, "mcp.v1.events.>") || slices.Contains(p.Publish, "$JS.API.CONSUMER.CREATE.MCP_EVENTS")
		if readsEvents != (role == Chat || role == Gateway || role == Operator) {
			t.Errorf("%s: reads every event (chat's too) is %v", role, readsEvents)
		}
		// Only the host of mcpbus up serves agents.* (it owns the server's users).
		if slices.Contains(p.Subscribe, "mcp.v1.agents.*") != (role == Host) {
			t.Errorf("%s: subscribe agents.* is %v", role, slices.Contains(p.Subscribe, "mcp.v1.agents.*"))
		}
		if !slices.Contains(p.Subscribe, Inbox(string(role))+".>") {
			t.Errorf("%s cannot read its own inbox", role)
		}
		for _, s := range p.Subscribe {
			if s == "_INBOX.>" || s == ">" || s == InboxRoot+".>" {
				t.Errorf("%s may read others' replies (%s)", role, s)
			}
		}
	}
	// The audit stream is append-only for everyone; a role writes only its
	// own chains (For, without a key: any of the role's), and only the
	// writers of audited events write at all.
	writers := []Role{Runner, Config, Credential, Chat, Gateway}
	for role, p := range perms {
		for _, d := range []string{"$JS.API.STREAM.PURGE.MCP_AUDIT", "$JS.API.STREAM.MSG.DELETE.MCP_AUDIT", "$JS.API.STREAM.DELETE.MCP_AUDIT", "$JS.API.STREAM.UPDATE.MCP_AUDIT"} {
			if !slices.Contains(p.DenyPublish, d) || slices.Contains(p.Publish, d) {
				t.Errorf("%s is not denied %s", role, d)
			}
		}
		for _, s := range p.Publish {
			if strings.HasPrefix(s, "mcp.v1.audit.") && (s != "mcp.v1.audit."+string(role)+".*" || !slices.Contains(writers, role)) {
				t.Errorf("%s may write audit chains %s", role, s)
			}
		}
	}
	for role, p := range perms {
		for _, s := range p.Publish {
			if s == "$JS.API.>" || s == "$KV.>" || s == ">" || s == "$JS.>" {
				t.Errorf("%s may use all of JetStream (%s)", role, s)
			}
			if strings.HasPrefix(s, "$JS.API.CONSUMER.CREATE.") && role == Agent {
				t.Errorf("an agent may create consumers (%s): their deliver subject is not checked", s)
			}
		}
		for bucket, owner := range map[string]Role{"mcp_apikeys": Gateway, "mcp_oauth_flows": Gateway, "mcp_token_revocations": Gateway, "mcp_configs": Config, "mcp_owners": Runner} {
			if slices.Contains(p.Publish, "$KV."+bucket+".>") && role != owner {
				t.Errorf("%s may write %s", role, bucket)
			}
		}
	}
	ap, err := AgentPerms("mcp.v1", "a1", []string{"github__*", "everything__echo", "*__read"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ap.Publish, []string{"mcp.v1.agent.a1.tools.list", "mcp.v1.agent.a1.tools.search", "_I.*.answers.>", "mcp.v1.agent.a1.call.github.*", "mcp.v1.agent.a1.rpc.github", "mcp.v1.agent.a1.cancel.github",
		"mcp.v1.agent.a1.call.everything.echo", "mcp.v1.agent.a1.rpc.everything", "mcp.v1.agent.a1.cancel.everything",
		"mcp.v1.agent.a1.call.>", "mcp.v1.agent.a1.rpc.*", "mcp.v1.agent.a1.cancel.*"}) {
		t.Errorf("agent publishes %v", ap.Publish)
	}
	if !slices.Equal(ap.Subscribe, []string{"_I.agent-a1.>", "mcp.v1.agent.a1.events.call.*", "mcp.v1.agent.a1.events.status.github",
		"mcp.v1.agent.a1.events.status.everything", "mcp.v1.agent.a1.events.status.*"}) {
		t.Errorf("agent subscribes %v", ap.Subscribe)
	}
	// A tool named as its server does is granted on its subject token.
	dotted, err := AgentPerms("mcp.v1", "a2", []string{"fs__files.remove"})
	if err != nil {
		t.Fatal(err)
	}
	if want := "mcp.v1.agent.a2.call.fs." + model.ToolToken("files.remove"); !slices.Contains(dotted.Publish, want) || want == "mcp.v1.agent.a2.call.fs.files.remove" {
		t.Errorf("a dotted tool's grant publishes %v, want %s", dotted.Publish, want)
	}
	for _, s := range append(ap.Subscribe, ap.Publish...) {
		if strings.Contains(s, "events.chat") || strings.Contains(s, "events.>") || strings.HasPrefix(s, "$JS") || strings.HasPrefix(s, "_I.>") {
			t.Errorf("an agent may use %s", s)
		}
	}
	// Replies are granted explicitly: every service answers into inboxes;
	// an agent answers nothing (no reply permission at all).
	for role, p := range perms {
		hasReplies := slices.Contains(p.Publish, "_I.>")
		if role == Agent && hasReplies || role != Agent && !hasReplies {
			t.Errorf("%s: publish _I.> is %v", role, hasReplies)
		}
	}
}

// TestRenderedConfigLoads: nats-server reads the rendered configuration, with
// the public keys from the environment, into exactly the table's users.
func TestRenderedConfigLoads(t *testing.T) {
	conf, err := Render("mcp.v1", nil)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]Role{}
	for _, role := range ServiceRoles() {
		kp, _ := nkeys.CreateUser()
		pub, _ := kp.PublicKey()
		t.Setenv(EnvNKey(role), pub)
		keys[pub] = role
	}
	path := filepath.Join(t.TempDir(), "auth.conf")
	if err := os.WriteFile(path, []byte("port: -1\n"+conf), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(opts.Nkeys) != len(ServiceRoles()) {
		t.Fatalf("%d users, want %d", len(opts.Nkeys), len(ServiceRoles()))
	}
	for _, u := range opts.Nkeys {
		role, ok := keys[u.Nkey]
		if !ok {
			t.Fatalf("unknown user %s", u.Nkey)
		}
		want, _ := For(role, "mcp.v1", Inbox(string(role)))
		if !slices.Equal(u.Permissions.Publish.Allow, want.Publish) || !slices.Equal(u.Permissions.Subscribe.Allow, want.Subscribe) {
			t.Errorf("%s: loaded %v / %v, table %v / %v", role, u.Permissions.Publish.Allow, u.Permissions.Subscribe.Allow, want.Publish, want.Subscribe)
		}
		if u.Permissions.Response != nil {
			t.Errorf("%s: allow_responses %+v (a responder would publish wherever a request's reply says)", role, u.Permissions.Response)
		}
	}
}

// MayPublish decides as the server does: an allow matches, no deny does.
// The gateway may call tools (the in-process hand-off asks it) but not
// write audit chains or answer as a runner.
func TestPermsMayPublish(t *testing.T) {
	p, err := For(Gateway, "mcp.v1", "_I.gateway")
	if err != nil {
		t.Fatal(err)
	}
	for subject, want := range map[string]bool{
		"mcp.v1.call.bench.echo":   true,
		"mcp.v1.audit.runner.x.y":  false,
		"mcp.v1.runtime.leases.x":  false,
		"other.v1.call.bench.echo": false,
	} {
		if got := p.MayPublish(subject); got != want {
			t.Errorf("gateway MayPublish(%s) = %v, want %v", subject, got, want)
		}
	}
}

// An identity whose key is known writes only its own audit chain and
// reads only its head (ForIdentity); a $VARIABLE key (Render without
// keys) leaves its role's chains.
func TestIdentityWritesOnlyItsOwnAuditChain(t *testing.T) {
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	other, _ := nkeys.CreateUser()
	otherPub, _ := other.PublicKey()
	p, err := ForIdentity(Identity{Name: "runner-1", Role: Runner, Public: pub}, "mcp.v1")
	if err != nil {
		t.Fatal(err)
	}
	for subject, want := range map[string]bool{
		"mcp.v1.audit.runner." + pub:                                   true,
		"$JS.API.DIRECT.GET.MCP_AUDIT.mcp.v1.audit.runner." + pub:      true,
		"mcp.v1.audit.runner." + otherPub:                              false,
		"$JS.API.DIRECT.GET.MCP_AUDIT.mcp.v1.audit.runner." + otherPub: false,
		"mcp.v1.audit.config." + pub:                                   false,
	} {
		if got := p.MayPublish(subject); got != want {
			t.Errorf("%s: may publish %v, want %v", subject, got, want)
		}
	}
	p, err = ForIdentity(Identity{Name: "runner", Role: Runner, Public: "$" + EnvNKey(Runner)}, "mcp.v1")
	if err != nil || !p.MayPublish("mcp.v1.audit.runner."+otherPub) {
		t.Fatalf("a $VARIABLE key: %v %v", err, p.Publish)
	}
}
