package security

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/mcpbus/mcpbus/libs/access"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/tools/mcpbus/stack"
)

// TestStolenRunnerSeed: the seed of one runner (a second runner identity of
// the deployment, copied by an attacker) does not open the secrets of a
// server another runner holds, whether the request names the holder's id
// unsigned, or signed with the stolen key; the credential service checks the
// signature against the key the holder's lease names. The owner itself gets
// its secret.
func TestStolenRunnerSeed(t *testing.T) {
	store, st := stackWithStolenSeed(t, "runner-2", access.Runner)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg, err := st.Client.CreateConfig(ctx, model.McpConfig{Name: "vault", Enabled: true,
		Package:   model.Package{Type: model.PackageBinary, Identifier: testServer},
		EnvVars:   map[string]model.EnvVar{"TOP_SECRET": {IsSecret: true}},
		Transport: model.Transport{Type: model.TransportStdio}, Runtime: model.Runtime{Eager: true}},
		&model.Credentials{Env: map[string]string{"TOP_SECRET": "s3cr3t-value"}})
	if err != nil {
		t.Fatal(err)
	}
	// The owner got it: the server sees the secret.
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := st.Client.Call(ctx, "vault", "env_sha256", json.RawMessage(`{"name":"TOP_SECRET"}`), nil)
		if err == nil && !strings.Contains(string(res), `"isError":true`) && strings.Contains(string(res), "text") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the owner never served the secret: %v %+v", err, res)
		}
		time.Sleep(200 * time.Millisecond)
	}

	var v violations
	nc, err := connectSeed(t, st, store.SeedFile("runner-2"), access.Inbox("runner-2"), &v)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	owners, err := js.KeyValue(ctx, "mcp_owners")
	if err != nil {
		t.Fatal(err)
	}
	e, err := owners.Get(ctx, "server.vault.0")
	if err != nil {
		t.Fatal(err)
	}
	var lease struct{ Runner, Key string }
	if err := json.Unmarshal(e.Value(), &lease); err != nil || lease.Runner == "" || !strings.HasPrefix(lease.Key, "U") {
		t.Fatalf("the lease %s names no holder key: %v", e.Value(), err)
	}
	curve, _ := nkeys.CreateCurveKeys()
	recipient, _ := curve.PublicKey()
	thief, err := store.Ensure("runner-2", access.Runner) // the identity made above, read back
	if err != nil {
		t.Fatal(err)
	}
	stolen, _ := nkeys.FromSeed(thief.Seed)
	stolenPub, _ := stolen.PublicKey()
	sign := func(req *model.CredResolveRequest, kp nkeys.KeyPair) {
		sig, _ := kp.Sign(req.ProofMessage())
		req.Signature = base64.RawURLEncoding.EncodeToString(sig)
	}
	unsigned := model.CredResolveRequest{ServerID: cfg.ID, RecipientKey: recipient, Runner: lease.Runner}
	withStolen := model.CredResolveRequest{ServerID: cfg.ID, RecipientKey: recipient, Runner: lease.Runner, RunnerKey: stolenPub, SignedAt: time.Now().UnixMilli()}
	sign(&withStolen, stolen)
	claimingKey := model.CredResolveRequest{ServerID: cfg.ID, RecipientKey: recipient, Runner: lease.Runner, RunnerKey: lease.Key, SignedAt: time.Now().UnixMilli()}
	sign(&claimingKey, stolen) // the holder's key named, the stolen key's signature
	asItself := model.CredResolveRequest{ServerID: cfg.ID, RecipientKey: recipient, Runner: "runner-2", RunnerKey: stolenPub, SignedAt: time.Now().UnixMilli()}
	sign(&asItself, stolen)
	for name, req := range map[string]model.CredResolveRequest{"unsigned in the holder's name": unsigned,
		"signed by the stolen key": withStolen, "naming the holder's key": claimingKey, "as itself": asItself} {
		body, _ := json.Marshal(req)
		m, err := nc.Request("mcp.v1.cred.resolve", body, 5*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if code := m.Header.Get("Nats-Service-Error-Code"); code == "" || strings.Contains(string(m.Data), "sealed") {
			t.Errorf("%s: answered %s", name, m.Data)
		} else {
			t.Logf("%s: refused: %s", name, m.Header.Get("Nats-Service-Error"))
		}
	}
	// Nor does it read every call: runners take calls only in queue groups.
	if sub, err := nc.Subscribe("mcp.v1.call.>", func(*nats.Msg) {}); err == nil {
		defer func() { _ = sub.Unsubscribe() }()
	}
	if !v.wait("mcp.v1.call.>") {
		t.Error("a runner identity subscribed to every call outside a queue group")
	}
	// The credential service says so in the audit trail.
	sub, err := st.Conn.SubscribeSync("mcp.v1.events.cred.>")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	// The subscription is the server's before the resolve (an unflushed one
	// missed the event under load).
	if err := st.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(withStolen)
	if _, err := nc.Request("mcp.v1.cred.resolve", body, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	ev, err := sub.NextMsg(5 * time.Second)
	if err != nil || !strings.Contains(string(ev.Data), "refused") {
		t.Errorf("audit event of the refused resolve: %v %v", err, ev)
	}
}

// stackWithStolenSeed starts mcpbus up with one more identity of role,
// named name, whose seed an attacker copied: the store holds its seed file.
func stackWithStolenSeed(t *testing.T, name string, role access.Role) (*access.Store, *stack.Stack) {
	t.Helper()
	store, err := access.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	thief, err := store.Ensure(name, role)
	if err != nil {
		t.Fatal(err)
	}
	thiefUser, err := access.User(thief, "mcp.v1")
	if err != nil {
		t.Fatal(err)
	}
	return store, startStack(t, thiefUser)
}
