package mcpserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
	"github.com/mcpbus/mcpbus/services/gateway/mcpserver"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// testServer is the go-sdk test server (libs/testmcp), built once.
var testServer string

func TestMain(m *testing.M) {
	testkit.Main(m, &testServer)
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// env is a bus with a runner, the aggregate on it, and its HTTP endpoint.
type env struct {
	*runnertest.Env
	agg *mcpserver.Aggregator
	url string
}

// start runs the bus, a runner and the aggregate; wrap, if given, stands in
// for the gateway's auth middleware.
func start(t *testing.T, opts mcpserver.Options, wrap func(http.Handler) http.Handler) *env {
	t.Helper()
	e := runnertest.Start(t, runner.Options{StopGrace: 100 * time.Millisecond, StopTimeout: 2 * time.Second,
		StartTimeout: 10 * time.Second, Logger: quiet()})
	if opts.Logger == nil {
		opts.Logger = quiet()
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	agg, err := mcpserver.New(ctx, e.NC, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agg.Close)
	h := agg.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &env{Env: e, agg: agg, url: srv.URL}
}

// addServer puts a test server named name and waits until it runs and the
// aggregate knows its tools: its catalog reaches the aggregate through a KV
// watch, after the status, so a call made at once could find no such tool.
func (e *env) addServer(t *testing.T, name string, envVars map[string]model.EnvVar, args ...string) {
	t.Helper()
	cfg := runnertest.Binary(name, testServer, append([]string{"-name", name}, args...)...)
	cfg.EnvVars = envVars
	e.Put(t, cfg)
	e.WaitState(t, name, model.StateRunning, 30*time.Second)
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
		return e.agg.Knows(name + "__echo"), "the aggregate does not know " + name + "__echo"
	})
}

// waitRuns waits until the test server's sleep has started n times (the
// lines it appends to TESTMCP_RUN_FILE, runs): a call cancelled, or
// doubled, before it reaches the server tests nothing.
func waitRuns(t *testing.T, runs string, n int) {
	t.Helper()
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
		data, _ := os.ReadFile(runs)
		got := strings.Count(string(data), "\n")
		return got >= n, fmt.Sprintf("the server started %d sleeps, want %d", got, n)
	})
}

// client is a go-sdk client session with its notifications recorded.
type client struct {
	*mcp.ClientSession
	listChanged chan struct{}
	// promptsChanged and resourcesChanged get prompts/list_changed and
	// resources/list_changed.
	promptsChanged, resourcesChanged chan struct{}
	// updated gets the URI of each notifications/resources/updated.
	updated  chan string
	mu       sync.Mutex
	progress []*mcp.ProgressNotificationParams
}

func (c *client) progressSeen() []*mcp.ProgressNotificationParams {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.progress)
}

type bearer struct {
	key  string
	base http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return b.base.RoundTrip(r)
}

// connect opens a session to url, as key when not empty: a stateful session
// of 2025-11-25 unless sessOpts names another version (see connectModern).
func connect(t *testing.T, url, key string, sessOpts *mcp.ClientSessionOptions) *client {
	t.Helper()
	c := &client{listChanged: make(chan struct{}, 16), promptsChanged: make(chan struct{}, 16), resourcesChanged: make(chan struct{}, 16), updated: make(chan string, 64)}
	signal := func(ch chan struct{}) {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	mc := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler:     func(context.Context, *mcp.ToolListChangedRequest) { signal(c.listChanged) },
		PromptListChangedHandler:   func(context.Context, *mcp.PromptListChangedRequest) { signal(c.promptsChanged) },
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) { signal(c.resourcesChanged) },
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			select {
			case c.updated <- req.Params.URI:
			default:
			}
		},
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			c.mu.Lock()
			c.progress = append(c.progress, req.Params)
			c.mu.Unlock()
		},
	})
	tr := &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1}
	if key != "" {
		tr.HTTPClient = &http.Client{Transport: bearer{key, http.DefaultTransport}}
	}
	if sessOpts == nil {
		sessOpts = &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := mc.Connect(ctx, tr, sessOpts)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	c.ClientSession = cs
	return c
}

func tools(t *testing.T, c *client) map[string]*mcp.Tool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := map[string]*mcp.Tool{}
	for tool, err := range c.Tools(ctx, nil) {
		if err != nil {
			t.Fatalf("tools/list: %v", err)
		}
		out[tool.Name] = tool
	}
	return out
}

func call(t *testing.T, c *client, name string, args any) (*mcp.CallToolResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return c.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
}

func textOf(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	var parts []string
	for _, c := range res.Content {
		tc, ok := c.(*mcp.TextContent)
		if !ok {
			t.Fatalf("content %T, want text", c)
		}
		parts = append(parts, tc.Text)
	}
	return strings.Join(parts, "")
}

func wantRPCError(t *testing.T, err error, code int64) *jsonrpc.Error {
	t.Helper()
	var werr *jsonrpc.Error
	if !errors.As(err, &werr) {
		t.Fatalf("error %v (%T), want a JSON-RPC error %d", err, err, code)
	}
	if werr.Code != code {
		t.Fatalf("JSON-RPC error %d %q, want code %d", werr.Code, werr.Message, code)
	}
	return werr
}

// wantMismatch checks the answer to arguments that fail tool's input schema:
// a tool result with isError and the gateway's message (SEP-1303).
func wantMismatch(t *testing.T, res *mcp.CallToolResult, err error, tool string) {
	t.Helper()
	if err != nil {
		t.Fatalf("schema mismatch: error %v, want a tool result with isError", err)
	}
	if !res.IsError || !strings.HasPrefix(textOf(t, res), "arguments do not match the input schema of "+tool+": ") {
		t.Fatalf("schema mismatch: isError %v, text %q", res.IsError, textOf(t, res))
	}
}

// waitListChanged waits for a tools/list_changed notification.
func waitListChanged(t *testing.T, c *client, what string) {
	t.Helper()
	select {
	case <-c.listChanged:
	case <-time.After(10 * time.Second):
		t.Fatalf("no tools/list_changed after %s", what)
	}
}

// count counts the messages on a subject, over its own connection.
func count(t *testing.T, e *env, subject string) *testkit.Counter {
	t.Helper()
	nc, err := e.NS.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return testkit.Count(t, nc, subject)
}

func TestListAndCall(t *testing.T) {
	e := start(t, mcpserver.Options{NoAuth: true}, nil)
	e.addServer(t, "alpha", nil)
	c := connect(t, e.url, "", nil)

	if got := c.InitializeResult().ServerInfo.Name; got != "mcpbus" {
		t.Fatalf("server name %q", got)
	}
	// A stateful endpoint refuses server/discover, so the client falls back
	// to the initialize handshake of the newest legacy version, with a session.
	if v := c.InitializeResult().ProtocolVersion; v != "2025-11-25" || c.ID() == "" {
		t.Fatalf("stateful session: protocol %s, id %q", v, c.ID())
	}
	list := tools(t, c)
	echo, ok := list["alpha__echo"]
	if !ok {
		t.Fatalf("alpha__echo missing from %v", slices.Sorted(mapsKeys(list)))
	}
	if echo.Meta[mcpserver.MetaServer] != "alpha" || echo.Meta[mcpserver.MetaTool] != "echo" {
		t.Fatalf("_meta of alpha__echo: %v", echo.Meta)
	}
	if echo.Description != "Echoes the message back" {
		t.Fatalf("description %q", echo.Description)
	}
	schema, _ := json.Marshal(echo.InputSchema)
	if !strings.Contains(string(schema), `"message"`) {
		t.Fatalf("input schema lost: %s", schema)
	}
	for _, name := range []string{"alpha__sleep", "alpha__progress", "alpha__fail", "alpha__add_tool"} {
		if _, ok := list[name]; !ok {
			t.Fatalf("%s missing", name)
		}
	}

	res, err := call(t, c, "alpha__echo", map[string]any{"message": "hello over the bus"})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || textOf(t, res) != "hello over the bus" {
		t.Fatalf("echo: %+v", res)
	}
	// A tool error is a result with isError, passed through as is.
	res, err = call(t, c, "alpha__fail", map[string]any{"message": "on purpose"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.Contains(textOf(t, res), "failed: on purpose") {
		t.Fatalf("fail: %+v", res)
	}
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func TestTraceContextReachesTheServer(t *testing.T) {
	e := start(t, mcpserver.Options{NoAuth: true}, nil)
	e.addServer(t, "alpha", nil)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	hc := &http.Client{Transport: headerRT{"traceparent", "00-" + traceID + "-00f067aa0ba902b7-01"}}
	mc := mcp.NewClient(&mcp.Implementation{Name: "traced", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := mc.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: e.url, HTTPClient: hc, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "alpha__meta", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	// The runner puts the trace context of the bus message into the MCP
	// request's _meta; the test server returns that _meta.
	var meta map[string]any
	if err := json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &meta); err != nil {
		t.Fatal(err)
	}
	tp, _ := meta["traceparent"].(string)
	if !strings.Contains(tp, traceID) {
		t.Fatalf("the MCP server got traceparent %q, want trace %s", tp, traceID)
	}
}

type headerRT struct{ k, v string }

func (h headerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(h.k, h.v)
	return http.DefaultTransport.RoundTrip(r)
}

func TestProgressAndCancelRelayed(t *testing.T) {
	e := start(t, mcpserver.Options{NoAuth: true}, nil)
	marker := filepath.Join(t.TempDir(), "cancelled")
	runs := filepath.Join(t.TempDir(), "runs")
	e.addServer(t, "alpha", map[string]model.EnvVar{"TESTMCP_CANCEL_FILE": {Value: marker}, "TESTMCP_RUN_FILE": {Value: runs}})
	c := connect(t, e.url, "", nil)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "alpha__progress",
		Arguments: map[string]any{"steps": 3, "ms": 20}, Meta: mcp.Meta{"progressToken": "tok-1"}})
	if err != nil {
		t.Fatal(err)
	}
	if textOf(t, res) != "done 3 steps" {
		t.Fatalf("progress result: %+v", res)
	}
	// Notifications and the result travel on the same stream, in order; but
	// go-sdk's client hands notifications to their handler on a queue of its
	// own, so the last may land just after CallTool returned.
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
		return len(c.progressSeen()) >= 3, fmt.Sprintf("%d progress notifications, want 3", len(c.progressSeen()))
	})
	got := c.progressSeen()
	if len(got) != 3 {
		t.Fatalf("%d progress notifications, want 3: %+v", len(got), got)
	}
	for i, p := range got {
		if p.ProgressToken != "tok-1" || p.Progress != float64(i+1) || p.Total != 3 || p.Message != fmt.Sprintf("step %d", i+1) {
			t.Fatalf("progress %d: %+v", i, p)
		}
	}

	// Cancellation: the client gives up, go-sdk sends notifications/cancelled,
	// the gateway cancels the bus call and the runner the MCP call.
	events := make(chan model.CallEvent, 8)
	sub, err := e.NC.Subscribe(e.Client.Subjects().Event("call", "alpha"), func(m *nats.Msg) {
		var ev model.CallEvent
		if json.Unmarshal(m.Data, &ev) == nil {
			events <- ev
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	// The client gives up once the server runs the call (its sleep appends a
	// line to runs): cancelled before it got there, the call never does.
	cctx, ccancel := context.WithCancel(context.Background())
	var cancelledAt atomic.Pointer[time.Time]
	go func() {
		defer ccancel()
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if data, _ := os.ReadFile(runs); len(data) > 0 {
				break
			}
		}
		now := time.Now()
		cancelledAt.Store(&now)
	}()
	_, err = c.CallTool(cctx, &mcp.CallToolParams{Name: "alpha__sleep", Arguments: map[string]any{"ms": 20000}})
	if err == nil {
		t.Fatal("a cancelled call succeeded")
	}
	if at := cancelledAt.Load(); at == nil || time.Since(*at) > 10*time.Second {
		t.Fatalf("the cancelled call returned %v after its cancellation", at)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(marker); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the MCP server never saw the cancellation")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Call events go out in bursts: the progress call's may come late.
	for waiting := time.After(30 * time.Second); ; {
		var ev model.CallEvent
		select {
		case ev = <-events:
		case <-waiting:
			t.Fatal("no call event for the cancelled call")
		}
		if ev.Tool != "sleep" {
			continue
		}
		if ev.Outcome != "cancelled" {
			t.Fatalf("call event %+v, want sleep cancelled", ev)
		}
		if ev.DurationMS > 10000 {
			t.Fatalf("the sleep ran %.0fms of 20000: not cancelled early", ev.DurationMS)
		}
		break
	}
	// The session is still good.
	if res, err := call(t, c, "alpha__echo", map[string]any{"message": "after"}); err != nil || textOf(t, res) != "after" {
		t.Fatalf("call after cancel: %v", err)
	}
}

func TestListChangedAndSameToolNames(t *testing.T) {
	e := start(t, mcpserver.Options{NoAuth: true}, nil)
	e.addServer(t, "alpha", nil)
	c := connect(t, e.url, "", nil)
	if _, ok := tools(t, c)["alpha__echo"]; !ok {
		t.Fatal("alpha__echo missing")
	}

	// A tool added at run time: runner → catalog → KV → aggregate → client.
	if _, err := call(t, c, "alpha__add_tool", map[string]any{"message": "late.tool"}); err != nil {
		t.Fatal(err)
	}
	waitListChanged(t, c, "add_tool")
	var late *mcp.Tool
	for deadline := time.Now().Add(30 * time.Second); late == nil; {
		for _, tool := range tools(t, c) {
			if tool.Meta[mcpserver.MetaTool] == "late.tool" {
				late = tool
			}
		}
		if late == nil && time.Now().After(deadline) {
			t.Fatal("late.tool not listed after list_changed")
		}
	}
	// "alpha__late.tool" is not a valid name: sanitised with a stable hash.
	if late.Name != model.NamespacedName("alpha", "late.tool") || strings.Contains(late.Name, ".") {
		t.Fatalf("late tool named %q", late.Name)
	}
	if res, err := call(t, c, late.Name, map[string]any{}); err != nil || textOf(t, res) != "added tool" {
		t.Fatalf("calling %s: %v", late.Name, err)
	}

	// A second server with the same tools: both visible, each call reaches its own server.
	e.addServer(t, "beta", nil)
	waitListChanged(t, c, "adding server beta")
	list := tools(t, c)
	for _, name := range []string{"alpha__echo", "beta__echo"} {
		if _, ok := list[name]; !ok {
			t.Fatalf("%s missing after beta started", name)
		}
	}
	if list["beta__echo"].Meta[mcpserver.MetaServer] != "beta" {
		t.Fatalf("beta__echo _meta %v", list["beta__echo"].Meta)
	}
	alphaCalls := count(t, e, "mcp.v1.call.alpha.>")
	betaCalls := count(t, e, "mcp.v1.call.beta.>")
	if res, err := call(t, c, "beta__echo", map[string]any{"message": "to beta"}); err != nil || textOf(t, res) != "to beta" {
		t.Fatalf("beta__echo: %v", err)
	}
	if a, b := alphaCalls.Settled(t), betaCalls.Settled(t); a != 0 || b != 1 {
		t.Fatalf("beta__echo reached alpha %d times, beta %d times", a, b)
	}

	// Removing a server takes its tools away and says so.
	cfgs, err := e.Store.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range cfgs {
		if cfg.Slug == "beta" {
			e.Delete(t, cfg.ID)
		}
	}
	waitListChanged(t, c, "removing server beta")
	for deadline := time.Now().Add(30 * time.Second); ; {
		list := tools(t, c)
		if _, ok := list["beta__echo"]; !ok {
			if _, ok := list["alpha__echo"]; !ok {
				t.Fatal("alpha__echo went with beta")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("beta__echo still listed after beta was deleted")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// keys is a stand-in for the auth middleware: the bearer token names the principal.
func keys(principals map[string]*auth.Principal) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			token := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
			if p, ok := principals[token]; ok {
				r = r.WithContext(auth.WithPrincipal(r.Context(), p))
			}
			next.ServeHTTP(w, r)
		})
	}
}

func TestFilteredPrincipal(t *testing.T) {
	principals := map[string]*auth.Principal{
		"narrow": {KeyID: "k-narrow", Scopes: []string{auth.ScopeCall}, Tools: model.ToolFilter{Allow: []string{"alpha__echo", "alpha__pro*"}}},
		"deny":   {KeyID: "k-deny", Scopes: []string{auth.ScopeCall}, Tools: model.ToolFilter{Deny: []string{"*__sleep"}}},
		"full":   {KeyID: "k-full", Scopes: []string{auth.ScopeCall}},
		"admin":  {KeyID: "k-admin", Scopes: []string{"read-only"}},
	}
	e := start(t, mcpserver.Options{}, keys(principals))
	e.addServer(t, "alpha", nil)

	narrow := connect(t, e.url, "narrow", nil)
	got := slices.Sorted(mapsKeys(tools(t, narrow)))
	if !slices.Equal(got, []string{"alpha__echo", "alpha__progress"}) {
		t.Fatalf("narrow key sees %v", got)
	}
	if res, err := call(t, narrow, "alpha__echo", map[string]any{"message": "allowed"}); err != nil || textOf(t, res) != "allowed" {
		t.Fatalf("allowed call: %v", err)
	}
	calls := count(t, e, "mcp.v1.call.alpha.>")
	_, err := call(t, narrow, "alpha__sleep", map[string]any{"ms": 1})
	if w := wantRPCError(t, err, jsonrpc.CodeInvalidParams); !strings.Contains(w.Message, "unknown tool") {
		t.Fatalf("filtered tool refused with %q", w.Message)
	}
	if n := calls.Settled(t); n != 0 {
		t.Fatalf("a refused call sent %d bus messages", n)
	}

	deny := connect(t, e.url, "deny", nil)
	dl := tools(t, deny)
	if _, ok := dl["alpha__sleep"]; ok {
		t.Fatal("denied tool listed")
	}
	if _, ok := dl["alpha__echo"]; !ok {
		t.Fatal("deny filter hid alpha__echo")
	}

	full := connect(t, e.url, "full", nil)
	if _, ok := tools(t, full)["alpha__sleep"]; !ok {
		t.Fatal("unfiltered key misses alpha__sleep")
	}

	// No principal (no middleware ran) and a key without the call scope are refused.
	for _, key := range []string{"", "admin"} {
		req, _ := http.NewRequest(http.MethodPost, e.url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := http.StatusUnauthorized // no principal
		if key != "" {
			want = http.StatusForbidden // authenticated, without the call scope
		}
		if resp.StatusCode != want || !strings.Contains(string(body), `"UNAUTHORIZED"`) {
			t.Fatalf("key %q: %d %s", key, resp.StatusCode, body)
		}
	}

	// A session opened by one key is not found for another.
	sid := narrow.ID()
	if sid == "" {
		t.Fatal("stateful session without id")
	}
	resp := raw(t, e.url, "full", sid, `{"jsonrpc":"2.0","id":7,"method":"tools/list"}`)
	if resp.status != http.StatusNotFound {
		t.Fatalf("another key's session: status %d %s", resp.status, resp.body)
	}
}

func TestBadInput(t *testing.T) {
	e := start(t, mcpserver.Options{NoAuth: true}, nil)
	e.addServer(t, "alpha", nil)
	c := connect(t, e.url, "", nil)
	calls := count(t, e, "mcp.v1.call.alpha.>")

	// Wrong argument types are refused at the gateway, as a tool error the
	// model can correct (SEP-1303): no bus traffic.
	res, err := call(t, c, "alpha__echo", map[string]any{"message": 42})
	wantMismatch(t, res, err, "alpha__echo")
	res, err = call(t, c, "alpha__sleep", map[string]any{"ms": "soon"})
	wantMismatch(t, res, err, "alpha__sleep")
	res, err = call(t, c, "alpha__echo", map[string]any{}) // message is required
	wantMismatch(t, res, err, "alpha__echo")
	if n := calls.Settled(t); n != 0 {
		t.Fatalf("invalid calls sent %d messages on the call subject", n)
	}
	// The counter does count: a good call is one message.
	if _, err := call(t, c, "alpha__echo", map[string]any{"message": "ok"}); err != nil {
		t.Fatal(err)
	}
	if n := calls.Settled(t); n != 1 {
		t.Fatalf("a valid call sent %d messages, want 1", n)
	}

	_, err = call(t, c, "alpha__nope", map[string]any{})
	if w := wantRPCError(t, err, jsonrpc.CodeInvalidParams); !strings.Contains(w.Message, "unknown tool") {
		t.Fatalf("unknown tool: %q", w.Message)
	}
	_, err = call(t, c, "nosuchserver__echo", nil)
	wantRPCError(t, err, jsonrpc.CodeInvalidParams)

	// Raw JSON-RPC on the session: malformed JSON, unknown method, arguments not an object.
	sid := c.ID()
	if r := raw(t, e.url, "", sid, `{"jsonrpc":"2.0","id":1,"method":`); r.status != http.StatusBadRequest || r.rpcCode(t) != jsonrpc.CodeParseError {
		t.Fatalf("malformed JSON: %d %s", r.status, r.body)
	}
	if r := raw(t, e.url, "", sid, `{"jsonrpc":"2.0","id":2,"method":"tools/frobnicate","params":{}}`); r.rpcCode(t) != jsonrpc.CodeMethodNotFound {
		t.Fatalf("unknown method: %d %s", r.status, r.body)
	}
	if r := raw(t, e.url, "", sid, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"alpha__echo","arguments":[1,2]}}`); r.rpcCode(t) != jsonrpc.CodeInvalidParams {
		t.Fatalf("array arguments: %d %s", r.status, r.body)
	}
	if n := calls.Settled(t); n != 1 {
		t.Fatalf("raw bad requests reached the bus: %d messages", n)
	}
}

type rawResp struct {
	status  int
	ctype   string // Content-Type
	session string // Mcp-Session-Id
	body    string
	header  http.Header
}

// message is the JSON-RPC message of the response: the JSON body, or the
// data of the first SSE event that has data.
func (r rawResp) message(t *testing.T) string {
	t.Helper()
	data := r.body
	if i := strings.Index(data, "data: "); i >= 0 {
		data = data[i+len("data: "):]
		if j := strings.IndexByte(data, '\n'); j >= 0 {
			data = data[:j]
		}
	}
	return strings.TrimSpace(data)
}

// rpcCode is the JSON-RPC error code of the response (a JSON body or the
// first SSE data line), 0 when none.
func (r rawResp) rpcCode(t *testing.T) int64 {
	t.Helper()
	data := r.message(t)
	var msg struct {
		Error *struct {
			Code int64 `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(data), &msg) != nil || msg.Error == nil {
		return 0
	}
	return msg.Error.Code
}

// raw POSTs one JSON-RPC body on a session.
func raw(t *testing.T, url, key, sid, body string) rawResp {
	t.Helper()
	return rawWith(t, url, key, sid, body, nil)
}

// rawWith is raw with headers set on top of a go-sdk client's (an empty
// value removes one; "Host" sets the request's host).
func rawWith(t *testing.T, url, key, sid, body string, hdr map[string]string) rawResp {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for k, v := range hdr {
		switch {
		case k == "Host":
			req.Host = v
		case v == "":
			req.Header.Del(k)
		default:
			req.Header.Set(k, v)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return rawResp{resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Mcp-Session-Id"), string(b), resp.Header}
}

func TestStateless(t *testing.T) {
	e := start(t, mcpserver.Options{NoAuth: true, Stateless: true}, nil)
	e.addServer(t, "alpha", nil)
	c := connect(t, e.url, "", &mcp.ClientSessionOptions{})
	if v := c.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("stateless session speaks %s, want 2026-07-28", v)
	}
	if c.ID() != "" {
		t.Fatalf("stateless mode handed out session id %q", c.ID())
	}
	if _, ok := tools(t, c)["alpha__echo"]; !ok {
		t.Fatal("alpha__echo missing")
	}
	res, err := call(t, c, "alpha__echo", map[string]any{"message": "stateless"})
	if err != nil || textOf(t, res) != "stateless" {
		t.Fatalf("stateless call: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "alpha__progress",
		Arguments: map[string]any{"steps": 2}, Meta: mcp.Meta{"progressToken": "s-1"}}); err != nil {
		t.Fatal(err)
	}
	// go-sdk's client hands notifications to their handler on a queue of its
	// own, so they may land just after CallTool returned.
	for deadline := time.Now().Add(30 * time.Second); len(c.progressSeen()) < 2 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := len(c.progressSeen()); n != 2 {
		t.Fatalf("%d progress notifications in stateless mode, want 2", n)
	}
	res, err = call(t, c, "alpha__echo", map[string]any{"message": 1})
	wantMismatch(t, res, err, "alpha__echo")

	// An older client (initialize handshake) works on the stateless endpoint too.
	old := connect(t, e.url, "", &mcp.ClientSessionOptions{ProtocolVersion: "2025-06-18"})
	if res, err := call(t, old, "alpha__echo", map[string]any{"message": "old"}); err != nil || textOf(t, res) != "old" {
		t.Fatalf("legacy client on the stateless endpoint: %v", err)
	}

	// list_changed reaches a 2026-07-28 client through subscriptions/listen.
	e.addServer(t, "beta", nil)
	waitListChanged(t, c, "adding server beta (stateless)")
	if _, ok := tools(t, c)["beta__echo"]; !ok {
		t.Fatal("beta__echo missing")
	}
}

func TestServeStdio(t *testing.T) {
	e := start(t, mcpserver.Options{}, nil)
	e.addServer(t, "alpha", nil)
	c2sR, c2sW := io.Pipe()
	s2cR, s2cW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	p := &auth.Principal{KeyID: "stdio", Scopes: []string{auth.ScopeCall}, Tools: model.ToolFilter{Deny: []string{"alpha__crash"}}}
	go func() { served <- e.agg.Serve(ctx, p, &mcp.IOTransport{Reader: c2sR, Writer: s2cW}) }()

	mc := mcp.NewClient(&mcp.Implementation{Name: "stdio-client", Version: "1"}, nil)
	cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer ccancel()
	cs, err := mc.Connect(cctx, &mcp.IOTransport{Reader: s2cR, Writer: c2sW}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := cs.ListTools(cctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	if !slices.Contains(names, "alpha__echo") || slices.Contains(names, "alpha__crash") {
		t.Fatalf("stdio tools %v", names)
	}
	out, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: "alpha__echo", Arguments: map[string]any{"message": "via stdio"}})
	if err != nil || out.Content[0].(*mcp.TextContent).Text != "via stdio" {
		t.Fatalf("stdio call: %v", err)
	}
	_ = cs.Close()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return after the client hung up")
	}
}

func TestResourcesAndPrompts(t *testing.T) {
	principals := map[string]*auth.Principal{
		"all":  {KeyID: "k-all", Scopes: []string{auth.ScopeCall}},
		"beta": {KeyID: "k-beta", Scopes: []string{auth.ScopeCall}, Tools: model.ToolFilter{Allow: []string{"beta__*"}}},
	}
	e := start(t, mcpserver.Options{}, keys(principals))
	e.addServer(t, "alpha", nil)
	// beta answers an unknown resource with -32002, as go-sdk did before v1.7.
	e.addServer(t, "beta", map[string]model.EnvVar{"MCPGODEBUG": {Value: "customresnotfounderrcode=1"}})
	c := connect(t, e.url, "all", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	caps := c.InitializeResult().Capabilities
	if caps.Resources == nil || caps.Prompts == nil || caps.Tools == nil || !caps.Tools.ListChanged {
		t.Fatalf("capabilities %+v", caps)
	}
	rl, err := c.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	uris := map[string]*mcp.Resource{}
	for _, r := range rl.Resources {
		uris[r.URI] = r
	}
	for _, s := range []string{"alpha", "beta"} {
		uri := "mcpbus://" + s + "/test:%2F%2Fgreeting"
		r, ok := uris[uri]
		if !ok {
			t.Fatalf("%s missing from %v", uri, slices.Sorted(mapsKeys(uris)))
		}
		if r.Meta[mcpserver.MetaServer] != s || r.Meta[mcpserver.MetaResource] != "test://greeting" || r.Name != s+"__greeting" {
			t.Fatalf("resource %+v", r)
		}
		read, err := c.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
		if err != nil {
			t.Fatal(err)
		}
		if len(read.Contents) != 1 || read.Contents[0].Text != "hello from "+s || read.Contents[0].URI != uri {
			t.Fatalf("read %s: %+v", uri, read.Contents[0])
		}
	}
	_, err = c.ReadResource(ctx, &mcp.ReadResourceParams{URI: "test://greeting"})
	if err == nil {
		t.Fatal("reading an URI without namespace succeeded")
	}
	// A server's "no such resource" (-32602 from go-sdk v1.7 on, -32002
	// before) is the gateway's own: -32602 on this protocol.
	for s, code := range map[string]int64{"alpha": jsonrpc.CodeInvalidParams, "beta": jsonrpc.CodeInvalidParams} {
		_, err := c.ReadResource(ctx, &mcp.ReadResourceParams{URI: "mcpbus://" + s + "/test:%2F%2Fnope"})
		var wire *jsonrpc.Error
		if !errors.As(err, &wire) || wire.Code != code || strings.Contains(wire.Message, "tool") {
			t.Errorf("%s: reading an unknown resource: %v, want code %d", s, err, code)
		}
	}

	pl, err := c.ListPrompts(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var prompts []string
	for _, p := range pl.Prompts {
		prompts = append(prompts, p.Name)
		if p.Name == "beta__greet" && (p.Meta[mcpserver.MetaServer] != "beta" || p.Meta[mcpserver.MetaPrompt] != "greet") {
			t.Fatalf("prompt _meta %v", p.Meta)
		}
	}
	if !slices.Equal(prompts, []string{"alpha__greet", "beta__greet"}) {
		t.Fatalf("prompts %v", prompts)
	}
	got, err := c.GetPrompt(ctx, &mcp.GetPromptParams{Name: "beta__greet", Arguments: map[string]string{"who": "Ada"}})
	if err != nil {
		t.Fatal(err)
	}
	if tc, ok := got.Messages[0].Content.(*mcp.TextContent); !ok || tc.Text != "Hello, Ada" {
		t.Fatalf("prompt: %+v", got.Messages[0])
	}
	_, err = c.GetPrompt(ctx, &mcp.GetPromptParams{Name: "alpha__nope"})
	wantRPCError(t, err, jsonrpc.CodeInvalidParams)

	// A key filtered to beta's tools reaches only beta's resources and prompts.
	b := connect(t, e.url, "beta", nil)
	pl, err = b.ListPrompts(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(pl.Prompts) != 1 || pl.Prompts[0].Name != "beta__greet" {
		t.Fatalf("filtered key prompts %+v", pl.Prompts)
	}
	if _, err := b.ReadResource(ctx, &mcp.ReadResourceParams{URI: "mcpbus://alpha/test:%2F%2Fgreeting"}); err == nil {
		t.Fatal("filtered key read alpha's resource")
	}
	if _, err := b.GetPrompt(ctx, &mcp.GetPromptParams{Name: "alpha__greet", Arguments: map[string]string{"who": "x"}}); err == nil {
		t.Fatal("filtered key got alpha's prompt")
	}
}
