package mcpserver

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
)

func TestResourceURIsRoundTrip(t *testing.T) {
	for _, uri := range []string{
		"test://greeting", "file:///home/me/a b.txt", "https://x.example/p?q=1&r=%20#f",
		"mcpbus://other/nested", "weird/../path", "ünïcode:ressource",
	} {
		ns := resourceURI("srv-1", uri)
		s, orig, ok := parseURI(ns)
		if !ok || s != "srv-1" || orig != uri {
			t.Fatalf("%q → %q → (%q, %q, %v)", uri, ns, s, orig, ok)
		}
	}
	// A template keeps its expressions; expanding one gives a URI that parses
	// back to what the server's template would have produced.
	tmpl := templateURI("srv", "file:///logs/{name}.txt")
	if tmpl != "mcpbus://srv/file:%2F%2F%2Flogs%2F{name}.txt" {
		t.Fatalf("template %q", tmpl)
	}
	if s, orig, ok := parseURI(tmpl); !ok || s != "srv" || orig != "file:///logs/{name}.txt" {
		t.Fatalf("template parses to (%q, %q, %v)", s, orig, ok)
	}
	if s, orig, ok := parseURI("mcpbus://srv/file:%2F%2F%2Flogs%2Fapp.txt"); !ok || s != "srv" || orig != "file:///logs/app.txt" {
		t.Fatalf("expanded template parses to (%q, %q, %v)", s, orig, ok)
	}
	for _, bad := range []string{"test://greeting", "mcpbus://", "mcpbus://srv", "mcpbus://srv/", "mcpbus://Bad Server/x", "mcpbus://srv/%zz"} {
		if _, _, ok := parseURI(bad); ok {
			t.Fatalf("%q parsed", bad)
		}
	}
}

// The server of a principal without sessions is dropped once idle; one with
// a live session stays.
func TestSweepKeepsBusyServers(t *testing.T) {
	a := newAggregator(t)
	idle := &auth.Principal{KeyID: "idle", Scopes: []string{auth.ScopeCall}}
	busy := &auth.Principal{KeyID: "busy", Scopes: []string{auth.ScopeCall}}
	if _, err := a.viewFor(idle, false); err != nil {
		t.Fatal(err)
	}
	st, ct := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- a.Serve(ctx, busy, st) }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	views := func() int { a.mu.Lock(); defer a.mu.Unlock(); return len(a.views) }
	if n := views(); n != 2 {
		t.Fatalf("%d servers, want 2", n)
	}
	a.sweep(time.Now().Add(time.Second))
	if n := views(); n != 1 {
		t.Fatalf("%d servers after a sweep, want the busy one only", n)
	}
	_ = cs.Close()
	select {
	case <-served:
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not end")
	}
	for deadline := time.Now().Add(30 * time.Second); views() != 0; {
		a.sweep(time.Now().Add(time.Second))
		if time.Now().After(deadline) {
			t.Fatal("the server of a closed session was kept")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Tokens of two issuers naming the same subject are two principals: each gets
// its own server (and so its own sessions, and calls checked as itself).
func TestViewPerIssuer(t *testing.T) {
	a := newAggregator(t)
	tok := func(iss string) *auth.Principal {
		return &auth.Principal{KeyID: auth.OAuthKeyIDPrefix + "alice", Scopes: []string{auth.ScopeCall}, Issuer: iss}
	}
	va, err := a.viewFor(tok("https://a.example"), false)
	if err != nil {
		t.Fatal(err)
	}
	vb, err := a.viewFor(tok("https://b.example"), false)
	if err != nil {
		t.Fatal(err)
	}
	if va == vb {
		t.Fatal("alice of two issuers share one server")
	}
	if got, want := vb.principal.Bus().ID, "oauth:https://b.example#alice"; got != want {
		t.Fatalf("the second issuer's server acts as %q, want %q", got, want)
	}
	if again, _ := a.viewFor(tok("https://a.example"), false); again != va {
		t.Fatal("the same issuer and subject got a new server")
	}
}

// newAggregator is an aggregate on an in-process bus of its own, no runner.
func newAggregator(t *testing.T) *Aggregator {
	t.Helper()
	ns, err := embednats.Start(embednats.Options{InProcessOnly: true, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	a, err := New(context.Background(), testkit.Connect(t, ns), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a
}

// BenchmarkCallParams: the fast path's read of a tools/call's params, by
// walking the members (callParams) and through a map (callParamsDecoded).
func BenchmarkCallParams(b *testing.B) {
	params := json.RawMessage(`{"name":"bench__echo","arguments":{"message":"hello from the benchmark, sixty bytes long"},"_meta":{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}`)
	for _, c := range []struct {
		name string
		read func(json.RawMessage) (string, json.RawMessage, map[string]json.RawMessage, bool)
	}{{"walk", callParams}, {"map", callParamsDecoded}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, _, ok := c.read(params); !ok {
					b.Fatal("not read")
				}
			}
		})
	}
}
