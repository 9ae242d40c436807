package security

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testmcp"
)

// TestAgentsOwnUpstreamCredentials: agents on a per-principal server. Each
// agent's calls and resource reads go upstream with its own credentials
// (set by the operator for agent:<name>), never another agent's and never
// the server's own session (the operator's); an agent without any is
// refused before anything reaches the server.
func TestAgentsOwnUpstreamCredentials(t *testing.T) {
	var mu sync.Mutex
	seen := map[string][]string{} // JSON-RPC method → the X-User-Key of each request
	url := testmcp.ServeHTTP(t, "remote", nil, testmcp.OnMethod(func(method string, r *http.Request) {
		if method == "tools/call" || method == "resources/read" {
			mu.Lock()
			seen[method] = append(seen[method], r.Header.Get("X-User-Key"))
			mu.Unlock()
		}
	}))
	st := startStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := model.McpConfig{Name: "remote", Enabled: true, Auth: model.ServerAuth{PerPrincipal: true},
		Package: model.Package{Type: model.PackageHTTP, Identifier: url}, Transport: model.Transport{Type: model.TransportHTTP, URL: url}}
	stored, err := st.Client.CreateConfig(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	agents := map[string]*nats.Conn{}
	for _, name := range []string{"first", "second", "without"} {
		a, err := st.CreateAgent(model.AgentCreateRequest{Name: name, Allow: []string{"remote__*"}})
		if err != nil {
			t.Fatal(err)
		}
		nc, err := connectSeed(t, st, a.SeedFile, a.InboxPrefix, &violations{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		agents[name] = nc
	}
	creds := credclient.New(st.Conn, "")
	for name, key := range map[string]string{"first": "key-of-first", "second": "key-of-second"} {
		who := "agent:" + name
		if _, err := creds.Set(ctx, model.CredSetRequest{ServerID: model.PrincipalCredentialID(stored.ID, who), Kind: model.CredPrincipal,
			Credentials: model.Credentials{Headers: map[string]string{"X-User-Key": key}}, Replace: true,
			For: &model.PrincipalOf{ServerID: stored.ID, Principal: who}}); err != nil {
			t.Fatal(err)
		}
		if err := st.Client.ApplyPrincipalSecrets(ctx, "remote", who); err != nil {
			t.Fatal(err)
		}
	}
	call := func(name string) *nats.Msg {
		t.Helper()
		m, err := agents[name].Request("mcp.v1.agent."+name+".call.remote.echo", []byte(`{"message":"hi"}`), 20*time.Second)
		if err != nil {
			t.Fatalf("%s's call: %v", name, err)
		}
		return m
	}
	read := func(name string) *nats.Msg {
		t.Helper()
		m, err := agents[name].Request("mcp.v1.agent."+name+".rpc.remote", []byte(`{"method":"resources/read","params":{"uri":"test://greeting"}}`), 20*time.Second)
		if err != nil {
			t.Fatalf("%s's read: %v", name, err)
		}
		return m
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if m := call("first"); m.Header.Get("Nats-Service-Error-Code") == "" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the first agent's call never ran: %s %s", m.Header.Get("Nats-Service-Error-Code"), m.Data)
		}
	}
	for _, name := range []string{"first", "second"} {
		if m := call(name); m.Header.Get("Nats-Service-Error-Code") != "" || !strings.Contains(string(m.Data), "hi") {
			t.Errorf("%s's call: %s %s", name, m.Header.Get("Nats-Service-Error-Code"), m.Data)
		}
		if m := read(name); m.Header.Get("Nats-Service-Error-Code") != "" || !strings.Contains(string(m.Data), "hello from remote") {
			t.Errorf("%s's read: %s %s", name, m.Header.Get("Nats-Service-Error-Code"), m.Data)
		}
	}
	for what, m := range map[string]*nats.Msg{"call": call("without"), "read": read("without")} {
		if code := m.Header.Get("Nats-Service-Error-Code"); code != "401" || !strings.Contains(string(m.Data), model.MsgNotAuthorized) {
			t.Errorf("the %s of an agent without credentials of its own: %s %s, want 401 not authorized", what, code, m.Data)
		}
	}

	mu.Lock()
	defer mu.Unlock()
	for method, users := range seen {
		for _, u := range users {
			if u != "key-of-first" && u != "key-of-second" {
				t.Errorf("an agent's %s went upstream with %q", method, u)
			}
		}
	}
	for _, method := range []string{"tools/call", "resources/read"} {
		got := strings.Join(seen[method], ",")
		if !strings.Contains(got, "key-of-first") || !strings.Contains(got, "key-of-second") {
			t.Errorf("%s upstream carried %q, want each agent's own key", method, got)
		}
	}
}
