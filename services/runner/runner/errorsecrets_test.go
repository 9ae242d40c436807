package runner_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// quoting is a remote MCP server whose errors quote the Authorization
// header it was sent: at tools/list when listFails, else in its tool's
// JSON-RPC error.
func quoting(t *testing.T, listFails bool) string {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "up", Version: "1"}, nil)
	s.AddTool(&mcp.Tool{Name: "lookup", InputSchema: &jsonschema.Schema{Type: "object"}}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return nil, &jsonrpc.Error{Code: -32603, Message: "upstream refused credentials: " + req.Extra.Header.Get("Authorization")}
	})
	if listFails {
		s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
			return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
				if method == "tools/list" {
					return nil, &jsonrpc.Error{Code: -32001, Message: "key rejected: " + req.GetExtra().Header.Get("Authorization")}
				}
				return next(ctx, method, req)
			}
		})
	}
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(srv.Close)
	return srv.URL
}

// events records every event the runner publishes.
func events(t *testing.T, nc *nats.Conn) func() []string {
	t.Helper()
	var mu sync.Mutex
	var raw []string
	sub, err := nc.Subscribe(bus.NewSubjects("").Prefix+".events.>", func(m *nats.Msg) {
		mu.Lock()
		raw = append(raw, m.Subject+" "+string(m.Data))
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() []string {
		time.Sleep(300 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), raw...)
	}
}

// TestServerErrorsKeepSecrets: a server's error text is redacted as its
// results are, wherever it goes: a start error quoting the server's own
// credential (status, status events, callers' errors), a tool's JSON-RPC
// error quoting it (the caller's error, call events, spans), and one
// quoting a principal's own token on a per-principal server (their reply,
// the call event that admins and the audit stream keep).
func TestServerErrorsKeepSecrets(t *testing.T) {
	remote := func(url string, perPrincipal bool) model.McpConfig {
		return model.McpConfig{ID: uuid.NewString(), Name: "remote", Enabled: true, AuthType: model.AuthAPIKey,
			Package:   model.Package{Type: model.PackageHTTP, Identifier: url},
			Transport: model.Transport{Type: model.TransportHTTP, URL: url, SecretHeaders: []string{"Authorization"}},
			Auth:      model.ServerAuth{PerPrincipal: perPrincipal},
			Runtime:   model.Runtime{Eager: true}}
	}
	clean := func(t *testing.T, secret string, where map[string]string) {
		t.Helper()
		for name, text := range where {
			if strings.Contains(text, secret) {
				t.Errorf("%s holds the secret: %s", name, text)
			}
		}
	}

	t.Run("start error", func(t *testing.T) {
		const secret = "sk-live-STATUS0123456789abcdef"
		opts := lifecycleOpts()
		cfg := remote(quoting(t, true), false)
		opts.Resolver = staticResolver{cfg.ID: {Headers: map[string]string{"Authorization": "Bearer " + secret}}}
		e := runnertest.Start(t, opts)
		seen := events(t, e.NC)
		e.Put(t, cfg)
		st := e.WaitState(t, "remote", model.StateError, 10*time.Second)
		if !strings.Contains(st.Message, "key rejected") {
			t.Fatalf("status message %q: want the server's words, redacted", st.Message)
		}
		_, err := call(t, e, "remote", "lookup", `{}`)
		clean(t, secret, map[string]string{"status": st.Message, "the caller's error": errText(err), "events": strings.Join(seen(), "\n")})
	})

	t.Run("tool error", func(t *testing.T) {
		const secret = "sk-live-REVIEW0123456789abcdef"
		exp, _ := recordSpans(t)
		opts := lifecycleOpts()
		cfg := remote(quoting(t, false), false)
		opts.Resolver = staticResolver{cfg.ID: {Headers: map[string]string{"Authorization": "Bearer " + secret}}}
		e := runnertest.Start(t, opts)
		e.Put(t, cfg)
		e.WaitState(t, "remote", model.StateRunning, 10*time.Second)
		seen := events(t, e.NC)
		_, err := call(t, e, "remote", "lookup", `{}`)
		if err == nil || !strings.Contains(err.Error(), "upstream refused credentials") {
			t.Fatalf("the caller's error %v: want the server's words, redacted", err)
		}
		where := map[string]string{"the caller's error": err.Error(), "events": strings.Join(seen(), "\n")}
		for _, sp := range exp.GetSpans().Snapshots() {
			where["span "+sp.Name()] = sp.Status().Description
		}
		clean(t, secret, where)
	})

	t.Run("a principal's token", func(t *testing.T) {
		const userTok = "alice-upstream-token-0123456789"
		opts := lifecycleOpts()
		cfg := remote(quoting(t, false), true)
		opts.Resolver = ppResolver{server: "server-own-token-0123456789", user: userTok}
		e := runnertest.Start(t, opts)
		e.Put(t, cfg)
		e.WaitState(t, "remote", model.StateRunning, 10*time.Second)
		seen := events(t, e.NC)
		reply := lookupAsAlice(t, e.NC)
		if !strings.Contains(reply, "upstream refused credentials") {
			t.Fatalf("alice's reply %q: want the server's words, redacted", reply)
		}
		clean(t, userTok, map[string]string{"alice's reply": reply, "events": strings.Join(seen(), "\n")})
	})

	t.Run("a principal's refreshed token", func(t *testing.T) {
		opts := lifecycleOpts()
		cfg := remote(quoting(t, false), true)
		res := &refreshingResolver{server: "server-own-token-0123456789"}
		opts.Resolver = res
		e := runnertest.Start(t, opts)
		e.Put(t, cfg)
		e.WaitState(t, "remote", model.StateRunning, 10*time.Second)
		seen := events(t, e.NC)
		var replies []string
		for range 3 { // each token lives 1 s: later calls go with refreshed ones
			replies = append(replies, lookupAsAlice(t, e.NC))
			time.Sleep(1100 * time.Millisecond)
		}
		issued := res.issued()
		if len(issued) < 2 {
			t.Fatalf("tokens issued %v: the session never refreshed", issued)
		}
		for _, tok := range issued {
			clean(t, tok, map[string]string{"alice's replies": strings.Join(replies, "\n"), "events": strings.Join(seen(), "\n")})
		}
	})
}

// refreshingResolver gives the server its own header and every principal a
// new OAuth token, good for 1 s, at each resolve.
type refreshingResolver struct {
	server string
	mu     sync.Mutex
	tokens []string
}

func (r *refreshingResolver) Resolve(context.Context, string) (model.ResolvedCredentials, error) {
	return model.ResolvedCredentials{Headers: map[string]string{"Authorization": "Bearer " + r.server}}, nil
}

func (r *refreshingResolver) ResolveFor(context.Context, string, string) (model.ResolvedCredentials, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	tok := fmt.Sprintf("alice-oauth-token-%d-0123456789", len(r.tokens))
	r.tokens = append(r.tokens, tok)
	return model.ResolvedCredentials{OAuth: &model.ResolvedOAuth{AccessToken: tok, TokenType: "Bearer", ExpiresAt: time.Now().Add(time.Second)}}, nil
}

func (r *refreshingResolver) issued() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.tokens...)
}

// lookupAsAlice calls remote's lookup as the principal key:alice and
// returns the reply's body and error header.
func lookupAsAlice(t *testing.T, nc *nats.Conn) string {
	t.Helper()
	msg := nats.NewMsg(bus.NewSubjects("").Call("remote", "lookup"))
	msg.Data = []byte(`{}`)
	msg.Header.Set(bus.HeaderRequestID, uuid.NewString())
	principal.Set(msg.Header, principal.Principal{ID: "key:alice", Kind: principal.KindKey})
	rep, err := nc.RequestMsg(msg, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return string(rep.Data) + " " + rep.Header.Get(bus.HeaderError)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// ppResolver resolves the server's own credentials and every principal's.
type ppResolver struct{ server, user string }

func (r ppResolver) Resolve(context.Context, string) (model.ResolvedCredentials, error) {
	return model.ResolvedCredentials{Headers: map[string]string{"Authorization": "Bearer " + r.server}}, nil
}

func (r ppResolver) ResolveFor(context.Context, string, string) (model.ResolvedCredentials, error) {
	return model.ResolvedCredentials{Headers: map[string]string{"Authorization": "Bearer " + r.user}}, nil
}
