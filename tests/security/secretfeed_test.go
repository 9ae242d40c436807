package security

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/mcpbus/mcpbus/libs/access"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/model"
)

// TestSecretFeed: on mcpbus up's stack (identities on), a stored secret of
// a server that was never started is blocked in the arguments of another
// server's call (the runner has it only from the credential service's
// fingerprint feed); a changed secret is blocked within a bound after its
// change event; no message on the wire carries either value; identities
// other than runners (the gateway's, an agent's) cannot ask for the feed.
func TestSecretFeed(t *testing.T) {
	const (
		first  = "never-started-secret-01"
		second = "never-started-secret-02"
	)
	ids, err := access.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	gw, err := ids.Ensure("gateway-2", access.Gateway)
	if err != nil {
		t.Fatal(err)
	}
	gwUser, err := access.User(gw, "mcp.v1")
	if err != nil {
		t.Fatal(err)
	}
	tapKey, _ := nkeys.CreateUser()
	tapPub, _ := tapKey.PublicKey()
	st := startStack(t, gwUser, &server.NkeyUser{Nkey: tapPub}) // the tap: no permissions set, sees everything
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	tap, err := nats.Connect(st.NATS.ClientURL(), nats.Nkey(tapPub, tapKey.Sign))
	if err != nil {
		t.Fatal(err)
	}
	defer tap.Close()
	var wireMu sync.Mutex
	var wire []string
	if _, err := tap.Subscribe(">", func(m *nats.Msg) {
		wireMu.Lock()
		wire = append(wire, m.Subject+" "+string(m.Data))
		wireMu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := tap.Flush(); err != nil {
		t.Fatal(err)
	}

	if _, err := st.Client.CreateConfig(ctx, model.McpConfig{Name: "alpha", Enabled: true,
		Package:   model.Package{Type: model.PackageBinary, Identifier: testServer},
		Transport: model.Transport{Type: model.TransportStdio}, Runtime: model.Runtime{Eager: true}}, nil); err != nil {
		t.Fatal(err)
	}
	ghost, err := st.Client.CreateConfig(ctx, model.McpConfig{Name: "ghost", Enabled: false,
		Package:   model.Package{Type: model.PackageBinary, Identifier: testServer},
		EnvVars:   map[string]model.EnvVar{"TOKEN": {IsSecret: true}},
		Transport: model.Transport{Type: model.TransportStdio}},
		&model.Credentials{Env: map[string]string{"TOKEN": first}})
	if err != nil {
		t.Fatal(err)
	}
	blocked := func(v string) bool {
		res, err := st.Client.Call(ctx, "alpha", "echo", json.RawMessage(`{"message":"`+v+`"}`), nil)
		return err == nil && strings.Contains(string(res), `"isError":true`) && strings.Contains(string(res), "rule mcpbus-known-secret")
	}
	within := func(what string, bound time.Duration, cond func() bool) time.Duration {
		t.Helper()
		start := time.Now()
		for !cond() {
			if time.Since(start) > bound {
				t.Fatalf("%s: not within %s", what, bound)
			}
			time.Sleep(50 * time.Millisecond)
		}
		return time.Since(start)
	}
	within("the never-started server's secret blocked in alpha's call", 30*time.Second, func() bool { return blocked(first) })
	if blocked("an-ordinary-message-99") {
		t.Fatal("an ordinary message was blocked")
	}

	// A new value (the server is disabled: nothing restarts): blocked once
	// the change event has made the runner fetch the feed again.
	if _, err := credclient.New(st.Conn, "").Set(ctx, model.CredSetRequest{ServerID: ghost.ID, Replace: true,
		Credentials: model.Credentials{Env: map[string]string{"TOKEN": second}}}); err != nil {
		t.Fatal(err)
	}
	took := within("the changed secret blocked", 3*time.Second, func() bool { return blocked(second) })
	t.Logf("the changed secret was blocked %s after the write", took.Round(time.Millisecond))

	// Only runners may ask: the gateway's identity and an agent's publish
	// is refused by NATS.
	curve, _ := nkeys.CreateCurveKeys()
	recipient, _ := curve.PublicKey()
	body, _ := json.Marshal(model.CredFingerprintsRequest{RecipientKey: recipient})
	var gv violations
	gnc, err := connectSeed(t, st, ids.SeedFile("gateway-2"), access.Inbox("gateway-2"), &gv)
	if err != nil {
		t.Fatal(err)
	}
	defer gnc.Close()
	agent, err := st.AddAgent("feedthief", []string{"alpha__*"})
	if err != nil {
		t.Fatal(err)
	}
	var av violations
	anc, err := connectSeed(t, st, agent.SeedFile, agent.InboxPrefix, &av)
	if err != nil {
		t.Fatal(err)
	}
	defer anc.Close()
	for name, c := range map[string]struct {
		nc *nats.Conn
		v  *violations
	}{"gateway": {gnc, &gv}, "agent": {anc, &av}} {
		if m, err := c.nc.Request("mcp.v1.cred.fingerprints", body, 500*time.Millisecond); err == nil {
			t.Errorf("the %s identity got an answer: %s", name, m.Data)
		}
		if !c.v.wait("mcp.v1.cred.fingerprints") {
			t.Errorf("no permission violation for the %s identity's cred.fingerprints", name)
		}
	}

	// The feed crossed the wire (a request, a sealed reply), never a value,
	// in clear or base64: no message but the test's own calls (arguments
	// and results, which carry the values on purpose) holds one.
	wireMu.Lock()
	defer wireMu.Unlock()
	var feeds int
	for _, m := range wire {
		if strings.HasPrefix(m, "mcp.v1.cred.fingerprints ") {
			feeds++
		}
		if strings.HasPrefix(m, "mcp.v1.call.alpha.echo ") || strings.Contains(m, `"content":[{"type":"text","text":"never-started-secret-0`) {
			continue
		}
		for _, v := range []string{first, second} {
			if strings.Contains(m, v) || strings.Contains(m, base64.StdEncoding.EncodeToString([]byte(v))) {
				t.Errorf("a message holds a secret value: %.300s", m)
			}
		}
	}
	if feeds < 2 {
		t.Errorf("%d feed requests on the wire, want the first and one after the change", feeds)
	}
}
