package runner_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testmcp"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// httpConfig is an HTTP server at url with the given headers.
func httpConfig(name, url string, headers map[string]string) model.McpConfig {
	return model.McpConfig{Name: name, Enabled: true,
		Package:   model.Package{Type: model.PackageHTTP, Identifier: url},
		Transport: model.Transport{Type: model.TransportHTTP, URL: url, Headers: headers},
		Runtime:   model.Runtime{Eager: true}}
}

// lastCallID is the JSON-RPC id of the last recorded tools/call span of tool.
func lastCallID(t *testing.T, exp *tracetest.InMemoryExporter, tool string) string {
	t.Helper()
	var id string
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, s := range exp.GetSpans().Snapshots() {
			if s.Name() == "tools/call "+tool {
				if v := attr(s, "jsonrpc.request.id"); v != "" {
					id = v
				}
			}
		}
		if id != "" {
			return id
		}
	}
	t.Fatalf("no tools/call %s span with a request id", tool)
	return ""
}

// Plain calls to a Streamable HTTP server take the raw path, whether the
// server answers with an SSE stream or application/json, and callers get
// the same replies as through go-sdk: text, a large result, a tool error.
func TestHTTPRawCalls(t *testing.T) {
	exp, _ := recordSpans(t)
	e := runnertest.Start(t, quickOpts())
	for _, mode := range []struct {
		name string
		opts *mcp.StreamableHTTPOptions
	}{{"sse", nil}, {"json", &mcp.StreamableHTTPOptions{JSONResponse: true}}} {
		t.Run(mode.name, func(t *testing.T) {
			e.Put(t, httpConfig(mode.name, testmcp.ServeHTTP(t, mode.name, mode.opts, nil), nil))
			e.WaitState(t, mode.name, model.StateRunning, 10*time.Second)
			calls := []struct{ tool, args string }{
				{"echo", `{"message":"hé \"quoted\" <tag>"}`},
				{"echo", "{\n  \"message\": \"pretty\"\n}"},
				{"fail", `{"message":"x"}`},
				{"large", `{"bytes":1048576}`},
			}
			replies := func() []string {
				var out []string
				for _, c := range calls {
					res, err := call(t, e, mode.name, c.tool, c.args)
					if err != nil {
						t.Fatalf("%s: %v", c.tool, err)
					}
					out = append(out, string(res))
				}
				return out
			}
			raw := replies()
			for _, tool := range []string{"echo", "fail", "large"} {
				if id := lastCallID(t, exp, tool); !strings.HasPrefix(id, "mcpbus-") {
					t.Fatalf("%s did not take the raw path: request id %s", tool, id)
				}
			}
			runner.SetRawCalls(false)
			defer runner.SetRawCalls(true)
			sdk := replies()
			for i, c := range calls {
				if raw[i] != sdk[i] {
					t.Errorf("%s: raw reply\n%.300s\ngo-sdk reply\n%.300s", c.tool, raw[i], sdk[i])
				}
			}
			if got := text(t, json.RawMessage(raw[3])); len(got) != 1048576 {
				t.Errorf("large result of %d bytes", len(got))
			}
			var r callResult
			if json.Unmarshal([]byte(raw[2]), &r) != nil || !r.IsError || r.Content[0].Text != "failed: x" {
				t.Errorf("fail: %s", raw[2])
			}
		})
	}
}

// Raw calls carry the configured headers (an API key here): the server
// refuses requests without them. When it starts refusing (a revoked key), a
// raw call fails as go-sdk's does: UNAUTHORIZED "Authentication failed.
// Check your API key.", and the server goes to error until it is restarted.
func TestHTTPRawCallHeadersAndRefusal(t *testing.T) {
	exp, _ := recordSpans(t)
	var refuse atomic.Bool
	var calls atomic.Int32
	url := testmcp.ServeHTTP(t, "keyed", nil, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Api-Key") != "k-123" || refuse.Load() {
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") != "" && r.Header.Get("Mcp-Protocol-Version") != "" {
				calls.Add(1)
			}
			h.ServeHTTP(w, r)
		})
	})
	e := runnertest.Start(t, lifecycleOpts())
	e.Put(t, httpConfig("keyed", url, map[string]string{"X-Api-Key": "k-123"}))
	e.WaitState(t, "keyed", model.StateRunning, 10*time.Second)
	before := calls.Load()
	if res, err := call(t, e, "keyed", "echo", `{"message":"with key"}`); err != nil || text(t, res) != "with key" {
		t.Fatalf("echo: %s %v", res, err)
	}
	if id := lastCallID(t, exp, "echo"); !strings.HasPrefix(id, "mcpbus-") {
		t.Fatalf("echo did not take the raw path: request id %s", id)
	}
	if calls.Load() == before {
		t.Fatal("the raw call reached the server without its session id and protocol version")
	}
	refuse.Store(true)
	_, err := call(t, e, "keyed", "echo", `{"message":"revoked"}`)
	if ae := wantCode(t, err, apierr.Unauthorized); ae.Message != model.MsgAuthFailed {
		t.Fatalf("refused call: %v", ae)
	}
	// The state turns to error a moment before its code is set (stop, then the reason).
	st := e.WaitState(t, "keyed", model.StateError, 5*time.Second)
	for deadline := time.Now().Add(5 * time.Second); st.Code == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		st = e.Status("keyed")
	}
	if st.State != model.StateError || st.Code != string(apierr.Unauthorized) {
		t.Fatalf("status %+v", st)
	}
}

// A session the server has forgotten (404 on its id) behaves on the raw path
// as on go-sdk's: the call fails alike, the runner starts a new session and
// the next call succeeds.
// The session lives 1 s idle: with 300 ms, a loaded CI run's reconnect
// (initialize, then tools/list) lost its new session between the two, three
// times over, and the server was given up.
func TestHTTPRawCallExpiredSession(t *testing.T) {
	url := testmcp.ServeHTTP(t, "expiring", &mcp.StreamableHTTPOptions{SessionTimeout: time.Second}, nil)
	e := runnertest.Start(t, lifecycleOpts())
	e.Put(t, httpConfig("expiring", url, nil))
	defer runner.SetRawCalls(true)
	var errs []string
	for _, raw := range []bool{true, false} {
		runner.SetRawCalls(raw)
		e.WaitState(t, "expiring", model.StateRunning, 10*time.Second)
		time.Sleep(2500 * time.Millisecond) // idle past the session timeout
		_, err := call(t, e, "expiring", "echo", `{"message":"late"}`)
		ae := wantCode(t, err, apierr.ServiceUnavailable)
		errs = append(errs, string(ae.Code))
		var res json.RawMessage
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if res, err = call(t, e, "expiring", "echo", `{"message":"again"}`); err == nil {
				break
			}
		}
		if err != nil || text(t, res) != "again" {
			t.Fatalf("raw=%v: no call succeeded after the session expired: %v", raw, err)
		}
	}
	if errs[0] != errs[1] {
		t.Fatalf("raw path %s, go-sdk %s", errs[0], errs[1])
	}
}

// A server that sends its own requests on a raw call's SSE stream before
// the result (roots/list, for a 2025-11-25 session) gets them answered by
// go-sdk, as on go-sdk's path, and the raw call then gets its result.
func TestHTTPRawCallServerRequests(t *testing.T) {
	exp, _ := recordSpans(t)
	e := runnertest.Start(t, quickOpts())
	cfg := httpConfig("rooted", testmcp.ServeHTTP(t, "rooted", nil, nil), nil)
	cfg.Roots = []model.Root{{URI: "file:///srv/data", Name: "data"}}
	e.Put(t, cfg)
	e.WaitState(t, "rooted", model.StateRunning, 10*time.Second)
	res, err := call(t, e, "rooted", "roots", `{}`)
	if err != nil || text(t, res) != "file:///srv/data" {
		t.Fatalf("roots: %s %v", res, err)
	}
	if id := lastCallID(t, exp, "roots"); !strings.HasPrefix(id, "mcpbus-") {
		t.Fatalf("roots did not take the raw path: request id %s", id)
	}
}

// A server of protocol 2026-07-28 (a stateless one: no session id) is
// called raw too, with the _meta triple and the Mcp-Method and Mcp-Name
// headers it requires; a multi round-trip result (roots, asked as input)
// goes on through go-sdk, which fulfils it.
func TestHTTPRawCallsProtocol2026(t *testing.T) {
	exp, _ := recordSpans(t)
	var missing atomic.Int32
	url := testmcp.ServeHTTP(t, "modern", &mcp.StreamableHTTPOptions{Stateless: true}, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && (r.Header.Get("Mcp-Method") == "" || r.Header.Get("Mcp-Protocol-Version") != "2026-07-28") {
				missing.Add(1)
			}
			h.ServeHTTP(w, r)
		})
	})
	e := runnertest.Start(t, quickOpts())
	cfg := httpConfig("modern", url, nil)
	cfg.Roots = []model.Root{{URI: "file:///srv/data", Name: "data"}}
	e.Put(t, cfg)
	e.WaitState(t, "modern", model.StateRunning, 10*time.Second)
	raw, err := call(t, e, "modern", "meta", ``)
	if err != nil {
		t.Fatal(err)
	}
	if id := lastCallID(t, exp, "meta"); !strings.HasPrefix(id, "mcpbus-") {
		t.Fatalf("a 2026-07-28 HTTP server was not called raw: request id %s", id)
	}
	runner.SetRawCalls(false)
	sdk, err := call(t, e, "modern", "meta", ``)
	runner.SetRawCalls(true)
	if err != nil {
		t.Fatal(err)
	}
	// withoutTrace checks the server saw the triple; the rest must match go-sdk's.
	if r, s := withoutTrace(t, string(raw)), withoutTrace(t, string(sdk)); r != s {
		t.Fatalf("_meta of the raw call %s, of go-sdk's %s", r, s)
	}
	if res, err := call(t, e, "modern", "roots", `{}`); err != nil || text(t, res) != "file:///srv/data" {
		t.Fatalf("roots: %s %v", res, err)
	}
	if n := missing.Load(); n != 0 {
		t.Fatalf("%d requests without the SEP-2243 headers", n)
	}
}

// A raw call that runs out of time fails as go-sdk's does.
func TestHTTPRawCallTimeout(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	cfg := httpConfig("slow", testmcp.ServeHTTP(t, "slow", nil, nil), nil)
	cfg.Runtime.CallTimeout = model.Duration(300 * time.Millisecond)
	e.Put(t, cfg)
	e.WaitState(t, "slow", model.StateRunning, 10*time.Second)
	defer runner.SetRawCalls(true)
	var msgs []string
	for _, raw := range []bool{true, false} {
		runner.SetRawCalls(raw)
		start := time.Now()
		_, err := call(t, e, "slow", "sleep", `{"ms":5000}`)
		ae := wantCode(t, err, apierr.Network)
		if time.Since(start) > 3*time.Second {
			t.Fatalf("raw=%v: the call took %s", raw, time.Since(start))
		}
		msgs = append(msgs, ae.Message)
	}
	if msgs[0] != msgs[1] {
		t.Fatalf("raw path %q, go-sdk %q", msgs[0], msgs[1])
	}
	if res, err := call(t, e, "slow", "echo", `{"message":"after"}`); err != nil || text(t, res) != "after" {
		t.Fatalf("echo after timeouts: %s %v", res, err)
	}
}

// An HTTP server's tools/list_changed (sent on the standalone SSE stream,
// outside any call) refreshes the catalog, as a stdio server's does.
func TestHTTPToolListChanged(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	e.Put(t, httpConfig("web", testmcp.ServeHTTP(t, "web", nil, nil), nil))
	e.WaitState(t, "web", model.StateRunning, 10*time.Second)
	if _, err := call(t, e, "web", "add_tool", `{"message":"late"}`); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		tools, _ := e.Client.ListTools(t.Context(), "web")
		for _, tool := range tools {
			if tool.Tool == "late" {
				if res, err := call(t, e, "web", "late", `{}`); err != nil || text(t, res) != "added tool" {
					t.Fatalf("calling the new tool: %s %v", res, err)
				}
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("catalog not refreshed after tools/list_changed")
		}
	}
}

// An upstream's 429 is the caller's RATE_LIMITED, with its Retry-After, not
// a failure of the server: the server stays running and the next call,
// once the upstream lets it, succeeds.
func TestHTTPRawCallRateLimited(t *testing.T) {
	var limit atomic.Bool
	url := testmcp.ServeHTTP(t, "limited", nil, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if limit.Load() && r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") != "" {
				w.Header().Set("Retry-After", "7")
				http.Error(w, "slow down", http.StatusTooManyRequests)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	e := runnertest.Start(t, lifecycleOpts())
	e.Put(t, httpConfig("limited", url, nil))
	e.WaitState(t, "limited", model.StateRunning, 10*time.Second)
	limit.Store(true)
	_, err := call(t, e, "limited", "echo", `{"message":"too many"}`)
	if ae := wantCode(t, err, apierr.RateLimited); !strings.Contains(ae.Message, "retry in 7 s") {
		t.Fatalf("a rate-limited call: %v", ae)
	}
	limit.Store(false)
	if res, err := call(t, e, "limited", "echo", `{"message":"later"}`); err != nil || text(t, res) != "later" {
		t.Fatalf("the call after the limit: %s %v", res, err)
	}
	if st := e.Status("limited"); st.State != model.StateRunning {
		t.Fatalf("status after a 429: %+v", st)
	}
}
