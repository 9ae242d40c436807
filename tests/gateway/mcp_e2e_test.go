package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/access"
	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/tests/internal/clitest"
)

// TestMCPPublishedServers drives the aggregated /mcp endpoint with the go-sdk
// client against the published npm servers everything and filesystem,
// enabled through the config service while a client is connected.
func TestMCPPublishedServers(t *testing.T) {
	t.Parallel()
	everything := npmBin(t, "mcp-server-everything")
	filesystem := npmBin(t, "mcp-server-filesystem")
	root := t.TempDir()
	const content = "read through the mcpbus gateway\n"
	file := filepath.Join(root, "note.txt")
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}

	e := startMCP(t, gateway.Options{})
	// Connected before any server exists: every tool it ever sees arrives
	// through tools/list_changed.
	s := connectMCP(t, e.url, e.admin)
	if tools := listTools(t, s.ClientSession); len(tools) != 0 {
		t.Fatalf("tools before any server was enabled: %v", sortedNames(tools))
	}

	var tools map[string]*mcp.Tool
	t.Run("list_changed", func(t *testing.T) {
		s.drainListChanged()
		e.enable(t, binaryConfig("everything", everything))
		tools = waitListChanged(t, s, 60*time.Second, "holds everything__echo", func(m map[string]*mcp.Tool) bool { return m["everything__echo"] != nil })

		s.drainListChanged()
		e.enable(t, binaryConfig("filesystem", filesystem, root))
		tools = waitListChanged(t, s, 60*time.Second, "holds filesystem's tools", func(m map[string]*mcp.Tool) bool {
			return byOrigin(m, "filesystem", "read_text_file") != nil
		})
		t.Logf("%d tools: %v", len(tools), sortedNames(tools))
	})
	if tools == nil {
		t.FailNow()
	}

	t.Run("list", func(t *testing.T) {
		// The catalog as the runner read it from the real servers.
		cat, err := e.st.Client.ListTools(ctxT(t, 20*time.Second), "")
		if err != nil {
			t.Fatal(err)
		}
		if len(cat) != len(tools) {
			t.Errorf("the gateway lists %d tools, the catalog has %d", len(tools), len(cat))
		}
		for _, c := range cat {
			got := tools[c.Name]
			if got == nil {
				t.Errorf("catalog tool %s (%s.%s) is not listed by the gateway", c.Name, c.Server, c.Tool)
				continue
			}
			if srv, orig := metaOf(got); srv != c.Server || orig != c.Tool {
				t.Errorf("%s: _meta says %s/%s, want %s/%s", c.Name, srv, orig, c.Server, c.Tool)
			}
			if want := c.Server + "__" + c.Tool; validName.MatchString(want) && c.Name != want {
				t.Errorf("tool %s.%s listed as %s, want %s", c.Server, c.Tool, c.Name, want)
			}
		}
		for name, tool := range tools {
			if !validName.MatchString(name) {
				t.Errorf("invalid tool name %q", name)
			}
			if schema, ok := tool.InputSchema.(map[string]any); !ok || schema["type"] != "object" {
				t.Errorf("%s: input schema %v, want an object schema", name, tool.InputSchema)
			}
		}
		for _, want := range []string{"everything__echo", "everything__get-sum", "everything__trigger-long-running-operation",
			"filesystem__read_text_file", "filesystem__list_directory"} {
			if tools[want] == nil {
				t.Errorf("%s is not listed", want)
			}
		}
	})

	t.Run("calls", func(t *testing.T) {
		if got := callText(t, s.ClientSession, "everything__echo", map[string]any{"message": "hello gateway"}); got != "Echo: hello gateway" {
			t.Errorf("everything__echo returned %q, want %q", got, "Echo: hello gateway")
		}
		if got := callText(t, s.ClientSession, "everything__get-sum", map[string]any{"a": 20, "b": 22}); !strings.Contains(got, "42") {
			t.Errorf("everything__get-sum 20+22 returned %q", got)
		}
		// Structured content, title, output schema and annotations come through.
		tool := tools["everything__get-structured-content"]
		if tool == nil || tool.OutputSchema == nil || tool.Annotations == nil || !tool.Annotations.ReadOnlyHint || tool.Title == "" {
			t.Errorf("everything__get-structured-content listed as %+v, want its title, output schema and annotations", tool)
		}
		res, err := callTool(t, s.ClientSession, "everything__get-structured-content", map[string]any{"location": "Chicago"})
		if err != nil || res.IsError {
			t.Fatalf("get-structured-content: %v %+v", err, res)
		}
		var weather struct {
			Temperature *float64 `json:"temperature"`
			Conditions  string   `json:"conditions"`
		}
		raw, _ := json.Marshal(res.StructuredContent)
		if json.Unmarshal(raw, &weather) != nil || weather.Temperature == nil || weather.Conditions == "" {
			t.Errorf("get-structured-content structured content %s", raw)
		}
		// Image content is relayed as an image, bytes intact.
		res, err = callTool(t, s.ClientSession, "everything__get-tiny-image", map[string]any{})
		if err != nil || res.IsError {
			t.Fatalf("get-tiny-image: %v %+v", err, res)
		}
		var img *mcp.ImageContent
		for _, c := range res.Content {
			if ic, ok := c.(*mcp.ImageContent); ok {
				img = ic
			}
		}
		if img == nil || img.MIMEType != "image/png" || len(img.Data) < 8 || string(img.Data[1:4]) != "PNG" {
			t.Errorf("get-tiny-image content %+v, want a PNG image", res.Content)
		}
		// Arguments against the schema are refused by the gateway, as a tool
		// error the model can correct (SEP-1303).
		res, err = callTool(t, s.ClientSession, "everything__get-sum", map[string]any{"a": "twenty"})
		wantSchemaMismatch(t, res, err, "everything__get-sum")
	})

	t.Run("filesystem", func(t *testing.T) {
		got := callText(t, s.ClientSession, "filesystem__read_text_file", map[string]any{"path": file})
		if got != content && got != strings.TrimSuffix(content, "\n") {
			t.Errorf("filesystem__read_text_file returned %q, want %q", got, content)
		}
		if got := callText(t, s.ClientSession, "filesystem__list_directory", map[string]any{"path": root}); !strings.Contains(got, "note.txt") {
			t.Errorf("filesystem__list_directory returned %q, want note.txt in it", got)
		}
		// Outside its root the server refuses: a tool error, relayed as such.
		outside := filepath.Join(t.TempDir(), "secret.txt")
		if err := os.WriteFile(outside, []byte("not for the server"), 0o600); err != nil {
			t.Fatal(err)
		}
		res, err := callTool(t, s.ClientSession, "filesystem__read_text_file", map[string]any{"path": outside})
		if err != nil {
			t.Fatalf("reading outside the root: %v, want a tool error result", err)
		}
		if !res.IsError || strings.Contains(textOf(res), "not for the server") {
			t.Errorf("reading outside the root: isError %v, %q", res.IsError, textOf(res))
		}
	})

	t.Run("progress", func(t *testing.T) {
		params := &mcp.CallToolParams{Name: "everything__trigger-long-running-operation",
			Arguments: map[string]any{"duration": 1.2, "steps": 4}}
		params.SetProgressToken("progress-e2e")
		before := len(s.progressSeen())
		res, err := s.CallTool(ctxT(t, 60*time.Second), params)
		if err != nil {
			t.Fatal(err)
		}
		if res.IsError || !strings.Contains(textOf(res), "ompleted") {
			t.Errorf("long running operation returned %q (isError %v)", textOf(res), res.IsError)
		}
		got := s.progressSeen()[before:]
		t.Logf("%d progress notifications", len(got))
		if len(got) < 2 {
			t.Fatalf("%d progress notifications relayed, want at least 2", len(got))
		}
		for i, p := range got {
			if p.ProgressToken != "progress-e2e" || p.Total != 4 || p.Progress < 1 || p.Progress > 4 {
				t.Errorf("progress %d: token %v progress %v total %v, want token progress-e2e, 1..4 of 4", i, p.ProgressToken, p.Progress, p.Total)
			}
			if i > 0 && p.Progress <= got[i-1].Progress {
				t.Errorf("progress does not increase: %v then %v", got[i-1].Progress, p.Progress)
			}
		}
	})

	t.Run("subscribe", func(t *testing.T) {
		// everything sends notifications/resources/updated every 5 s for
		// the resources subscribed to, once its toggle tool starts them.
		res, err := s.ListResources(ctxT(t, 20*time.Second), nil)
		if err != nil {
			t.Fatal(err)
		}
		uri := ""
		for _, r := range res.Resources {
			if strings.HasPrefix(r.URI, "mcpbus://everything/") {
				uri = r.URI
				break
			}
		}
		if uri == "" {
			t.Fatalf("no resource of everything among %d", len(res.Resources))
		}
		if err := s.Subscribe(ctxT(t, 20*time.Second), &mcp.SubscribeParams{URI: uri}); err != nil {
			t.Fatalf("subscribing to %s: %v", uri, err)
		}
		if got := callText(t, s.ClientSession, "everything__toggle-subscriber-updates", map[string]any{}); !strings.Contains(got, "Started") {
			t.Fatalf("toggle-subscriber-updates: %q", got)
		}
		defer callText(t, s.ClientSession, "everything__toggle-subscriber-updates", map[string]any{})
		select {
		case got := <-s.updated:
			if got != uri {
				t.Fatalf("resources/updated of %s, want %s", got, uri)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no resources/updated of %s within 30 s", uri)
		}
		if err := s.Unsubscribe(ctxT(t, 20*time.Second), &mcp.UnsubscribeParams{URI: uri}); err != nil {
			t.Fatalf("unsubscribing: %v", err)
		}
	})

	t.Run("cancel", func(t *testing.T) {
		// Follow the runner's call events of everything from now on.
		events := make(chan model.CallEvent, 64)
		fctx, stopFollow := context.WithCancel(t.Context())
		followed := make(chan error, 1)
		go func() {
			followed <- e.st.Client.FollowEvents(fctx, bus.NewSubjects("").Event("call", "everything"), false, func(ev client.Event) {
				var ce model.CallEvent
				if json.Unmarshal(ev.Data, &ce) == nil {
					events <- ce
				}
			})
		}()
		defer func() {
			stopFollow()
			select {
			case <-followed:
			case <-time.After(10 * time.Second):
				t.Error("FollowEvents did not return")
			}
		}()
		time.Sleep(300 * time.Millisecond) // let the consumer start: it delivers new events only

		params := &mcp.CallToolParams{Name: "everything__trigger-long-running-operation",
			Arguments: map[string]any{"duration": 60, "steps": 60}}
		params.SetProgressToken("cancel-e2e")
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		type outcome struct {
			err error
			at  time.Time
		}
		done := make(chan outcome, 1)
		began := time.Now()
		go func() {
			_, err := s.CallTool(ctx, params)
			done <- outcome{err, time.Now()}
		}()
		// The first progress proves the call is running at the server.
		deadline := time.After(60 * time.Second)
	wait:
		for {
			for _, p := range s.progressSeen() {
				if p.ProgressToken == "cancel-e2e" {
					break wait
				}
			}
			select {
			case <-s.gotProg:
			case o := <-done:
				t.Fatalf("the call ended before any progress: %v", o.err)
			case <-deadline:
				t.Fatal("no progress from the long running operation within 60s")
			}
		}
		cancelled := time.Now()
		cancel()
		select {
		case o := <-done:
			took := o.at.Sub(cancelled)
			t.Logf("the cancelled call returned after %s: %v", took.Round(time.Millisecond), o.err)
			if o.err == nil {
				t.Error("a cancelled call returned no error")
			}
			if took > 5*time.Second {
				t.Errorf("the cancelled call took %s to return", took)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("the call did not return within 15s of its cancellation")
		}
		// The cancellation reached the runner: its call event says so.
		timeout := time.After(30 * time.Second)
		for {
			select {
			case ev := <-events:
				t.Logf("call event: %+v", ev)
				// Call events go out in bursts: one of an earlier call may come late.
				if ev.Tool != "trigger-long-running-operation" || ev.At.Before(began) {
					continue
				}
				if ev.Outcome != "cancelled" {
					t.Fatalf("call event outcome %q, want cancelled: %+v", ev.Outcome, ev)
				}
				if ev.DurationMS >= 30000 {
					t.Errorf("the cancelled call ran %.0fms at the runner: not stopped early", ev.DurationMS)
				}
			case <-timeout:
				t.Fatal("no call event of the cancelled call within 30s")
			}
			break
		}
		// The session is still good.
		if got := callText(t, s.ClientSession, "everything__echo", map[string]any{"message": "after cancel"}); got != "Echo: after cancel" {
			t.Errorf("echo after the cancellation returned %q", got)
		}
	})

	t.Run("disable", func(t *testing.T) {
		s.drainListChanged()
		if _, err := e.st.Client.SetEnabled(ctxT(t, 60*time.Second), "filesystem", false); err != nil {
			t.Fatal(err)
		}
		waitListChanged(t, s, 60*time.Second, "lost filesystem's tools", func(m map[string]*mcp.Tool) bool {
			return byOrigin(m, "filesystem", "read_text_file") == nil && m["everything__echo"] != nil
		})
		if _, err := callTool(t, s.ClientSession, "filesystem__read_text_file", map[string]any{"path": file}); err == nil {
			t.Error("a tool of a disabled server could still be called")
		}
	})
}

// TestMCPCancelReachesServer: a client cancelling a tools/call on /mcp stops
// the handler inside the MCP server process itself (the go-sdk test server's
// sleep writes TESTMCP_CANCEL_FILE when its context ends), through gateway,
// bus and runner.
func TestMCPCancelReachesServer(t *testing.T) {
	t.Parallel()
	e := startMCP(t, gateway.Options{})
	mark := filepath.Join(t.TempDir(), "cancelled")
	runs := filepath.Join(t.TempDir(), "runs")
	cfg := testServerConfig("sleeper")
	cfg.EnvVars["TESTMCP_CANCEL_FILE"] = model.EnvVar{Value: mark}
	cfg.EnvVars["TESTMCP_RUN_FILE"] = model.EnvVar{Value: runs}
	e.enable(t, cfg)
	s := connectMCP(t, e.url, e.admin)
	waitList(t, s.ClientSession, 30*time.Second, "held sleeper__sleep", func(m map[string]*mcp.Tool) bool { return m["sleeper__sleep"] != nil })

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "sleeper__sleep", Arguments: map[string]any{"ms": 120000}})
		done <- err
	}()
	waitStarted(t, runs, "sleep", 1) // a call cancelled before it reaches the server never does
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the cancelled sleep returned no error")
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the cancelled call did not return within 15s")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		data, err := os.ReadFile(mark)
		if err == nil && string(data) == "cancelled" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server's sleep handler was never cancelled (%v): the cancellation stopped short of the server", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the server saw the cancellation %s after the call began", time.Since(start).Round(time.Millisecond))
	// The server is still serving.
	if got := callText(t, s.ClientSession, "sleeper__sleep", map[string]any{"ms": 10}); got != "slept 10ms" {
		t.Errorf("sleep after the cancellation returned %q", got)
	}
}

// TestMCPNameClash runs several copies of the go-sdk test server: the same
// tool names get distinct namespaced names, every call reaches its own server,
// and slugs that would make namespaced names clash are refused.
func TestMCPNameClash(t *testing.T) {
	t.Parallel()
	e := startMCP(t, gateway.Options{})
	s := connectMCP(t, e.url, e.admin)
	for _, name := range []string{"alpha", "beta"} {
		e.enable(t, testServerConfig(name))
	}
	tools := waitList(t, s.ClientSession, 30*time.Second, "held both echos", func(m map[string]*mcp.Tool) bool {
		return m["alpha__echo"] != nil && m["beta__echo"] != nil
	})
	for _, name := range []string{"alpha", "beta"} {
		if srv, orig := metaOf(tools[name+"__echo"]); srv != name || orig != "echo" {
			t.Errorf("%s__echo: _meta %s/%s", name, srv, orig)
		}
		if got := callText(t, s.ClientSession, name+"__env", map[string]any{"name": "SERVER_ID"}); got != name {
			t.Errorf("%s__env SERVER_ID = %q: the call reached another server", name, got)
		}
		if got := callText(t, s.ClientSession, name+"__echo", map[string]any{"message": "to " + name}); got != "to "+name {
			t.Errorf("%s__echo returned %q", name, got)
		}
	}

	// A clash of the namespaced names themselves (server "clash" with tool
	// "x__echo" against server "clash__x" with tool "echo") can no longer be
	// made: a slug holding "__" or ending in "_" is refused, so a name's first
	// "__" always ends its server. A name that would give one is slugged
	// without it.
	for _, slug := range []string{"clash__x", "clash_"} {
		cfg := testServerConfig("refused")
		cfg.Slug = slug
		_, err := e.st.Client.CreateConfig(ctxT(t, 30*time.Second), cfg, nil)
		if ae := apierr.From(err); err == nil || ae.Code != apierr.Validation || ae.Field != "slug" {
			t.Errorf("creating a server with slug %q: %v, want a VALIDATION error at slug", slug, err)
		}
	}
	if slug := e.enable(t, testServerConfig("clash__x")); slug != "clash_x" {
		t.Errorf("the name clash__x was slugged %q, want clash_x", slug)
	}
	e.enable(t, testServerConfig("clash"))
	waitList(t, s.ClientSession, 30*time.Second, "held clash__echo", func(m map[string]*mcp.Tool) bool { return m["clash__echo"] != nil })
	s.drainListChanged()
	if got := callText(t, s.ClientSession, "clash__add_tool", map[string]any{"message": "x__echo"}); got != "added x__echo" {
		t.Fatalf("clash__add_tool returned %q", got)
	}
	tools = waitListChanged(t, s, 30*time.Second, "held clash__x__echo", func(m map[string]*mcp.Tool) bool {
		return m["clash__x__echo"] != nil
	})
	if srv, orig := metaOf(tools["clash__x__echo"]); srv != "clash" || orig != "x__echo" {
		t.Errorf("clash__x__echo: _meta %s/%s, want clash/x__echo", srv, orig)
	}
	if got := callText(t, s.ClientSession, "clash__x__echo", map[string]any{}); got != "added tool" {
		t.Errorf("clash__x__echo returned %q, want the added tool's answer", got)
	}
	if got := callText(t, s.ClientSession, "clash_x__echo", map[string]any{"message": "to clash_x"}); got != "to clash_x" {
		t.Errorf("clash_x__echo returned %q", got)
	}
}

// TestMCPSanitizedNames: tool names with spaces, parentheses and dots (the
// go-sdk everything example server; a test server tool added at run time)
// are listed under valid names with the original in _meta, and calling them
// by those names works.
func TestMCPSanitizedNames(t *testing.T) {
	t.Parallel()
	gse := goBuild(t, filepath.Join(clitest.RepoRoot(t), "tests"), "github.com/modelcontextprotocol/go-sdk/examples/server/everything", "gosdk-everything")
	e := startMCP(t, gateway.Options{})
	s := connectMCP(t, e.url, e.admin)
	e.enable(t, binaryConfig("gse", gse))
	// Both greets: a list may be read while the catalog still fills.
	tools := waitList(t, s.ClientSession, 30*time.Second, "held gse__greet and greet (structured)", func(m map[string]*mcp.Tool) bool {
		return m["gse__greet"] != nil && byOrigin(m, "gse", "greet (structured)") != nil
	})
	for name := range tools {
		if !validName.MatchString(name) {
			t.Errorf("invalid tool name %q", name)
		}
	}
	spaced := byOrigin(tools, "gse", "greet (structured)")
	if spaced == nil {
		t.Fatalf("no listed tool has _meta gse/\"greet (structured)\": %v", sortedNames(tools))
	}
	t.Logf("\"greet (structured)\" is listed as %s", spaced.Name)
	if !strings.HasPrefix(spaced.Name, "gse__greet") {
		t.Errorf("%s: want a name derived from gse__greet…", spaced.Name)
	}
	res, err := callTool(t, s.ClientSession, spaced.Name, map[string]any{"name": "Ada"})
	if err != nil || res.IsError {
		t.Fatalf("calling %s: %v %+v", spaced.Name, err, res)
	}
	var out struct {
		Message string `json:"message"`
	}
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, &out); err != nil || out.Message != "Hi Ada" {
		t.Errorf("%s structured content %s, want {\"message\":\"Hi Ada\"}", spaced.Name, raw)
	}
	if got := callText(t, s.ClientSession, "gse__greet", map[string]any{"name": "Bob"}); got != "Hi Bob" {
		t.Errorf("gse__greet returned %q", got)
	}
	// Every original name is reachable through exactly one listed tool.
	seen := map[string]string{}
	for name, tool := range tools {
		srv, orig := metaOf(tool)
		if srv != "gse" || orig == "" {
			t.Errorf("%s: _meta %s/%q", name, srv, orig)
		}
		if prev, dup := seen[orig]; dup {
			t.Errorf("%q is listed twice: %s and %s", orig, prev, name)
		}
		seen[orig] = name
	}
	for _, orig := range []string{"greet (with Icons)", "greet (content with ResourceLink)", "elicit (form)", "ping"} {
		if _, ok := seen[orig]; !ok {
			t.Errorf("%q is not listed", orig)
		}
	}

	// A dotted name, added at run time to a test server.
	e.enable(t, testServerConfig("dots"))
	waitList(t, s.ClientSession, 30*time.Second, "held dots__add_tool", func(m map[string]*mcp.Tool) bool { return m["dots__add_tool"] != nil })
	s.drainListChanged()
	callText(t, s.ClientSession, "dots__add_tool", map[string]any{"message": "my tool.v2"})
	var dotted *mcp.Tool
	waitListChanged(t, s, 30*time.Second, "held \"my tool.v2\"", func(m map[string]*mcp.Tool) bool {
		dotted = byOrigin(m, "dots", "my tool.v2")
		return dotted != nil
	})
	t.Logf("\"my tool.v2\" is listed as %s", dotted.Name)
	if !validName.MatchString(dotted.Name) || !strings.HasPrefix(dotted.Name, "dots__my_tool_v2") {
		t.Errorf("\"my tool.v2\" listed as %q", dotted.Name)
	}
	if got := callText(t, s.ClientSession, dotted.Name, map[string]any{}); got != "added tool" {
		t.Errorf("%s returned %q", dotted.Name, got)
	}
	// The REST list agrees with the MCP one.
	r := httpDo(t, "GET", e.url+"/mcp/tools", e.admin, nil)
	if r.status != 200 || !strings.Contains(string(r.body), `"`+dotted.Name+`"`) || !strings.Contains(string(r.body), `"`+spaced.Name+`"`) {
		t.Errorf("GET /mcp/tools: %d, want %s and %s in %s", r.status, dotted.Name, spaced.Name, truncate(r.body, 2000))
	}
}

func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "…"
}

// TestMCPThousandTools writes 10 catalogs of 100 tools each straight into KV
// mcp_tools (some names long, some with spaces and dots) and lists them
// through the gateway with the go-sdk client over HTTP: all 1,000, with
// unique valid names, each mapping back to its catalog entry, within bounds.
// Not parallel: the bounds are wall-clock, and the package's parallel tests
// wait until it is done.
func TestMCPThousandTools(t *testing.T) {
	e := startMCP(t, gateway.Options{})
	s := connectMCP(t, e.url, e.admin)
	// Catalogs are the runners' to write: write them as one.
	runnerNC, err := e.st.ConnectAs("test-catalog-writer", access.Runner)
	if err != nil {
		t.Fatal(err)
	}
	defer runnerNC.Close()
	js, err := jetstream.New(runnerNC)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctxT(t, 10*time.Second), bus.BucketTools)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{} // server + "\x00" + tool
	schema := json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)
	written := time.Now()
	for sv := range 10 {
		server := fmt.Sprintf("bulk-%02d", sv)
		cat := model.Catalog{Server: server, UpdatedAt: time.Now().UTC()}
		for i := range 100 {
			tool := fmt.Sprintf("tool_%03d", i)
			switch i % 10 {
			case 0:
				tool = fmt.Sprintf("tool %03d.v1", i) // spaces and dots
			case 1:
				tool = fmt.Sprintf("%s_%03d", strings.Repeat("very_long_tool_name_", 4), i) // over 64 namespaced
			}
			want[server+"\x00"+tool] = true
			cat.Tools = append(cat.Tools, model.Tool{
				Name: model.NamespacedName(server, tool), Server: server, Tool: tool,
				Subject:     bus.NewSubjects("").Call(server, model.ToolToken(tool)),
				Description: fmt.Sprintf("fake tool %d of %s", i, server), InputSchema: schema,
			})
		}
		data, err := json.Marshal(cat)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctxT(t, 10*time.Second), server, data); err != nil {
			t.Fatal(err)
		}
	}
	putTook := time.Since(written)

	// Until the watch has all of them, then one timed full listing.
	var tools map[string]*mcp.Tool
	deadline := time.Now().Add(60 * time.Second)
	for {
		tools = listTools(t, s.ClientSession)
		if len(tools) >= 1000 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	visible := time.Since(written)
	listStart := time.Now()
	tools = listTools(t, s.ClientSession)
	listTook := time.Since(listStart)
	fresh := connectMCP(t, e.url, e.admin)
	freshStart := time.Now()
	freshTools := listTools(t, fresh.ClientSession)
	freshTook := time.Since(freshStart)
	t.Logf("1,000 tools: KV puts %s, visible through /mcp after %s, one full tools/list %s, first list of a new session %s",
		putTook.Round(time.Millisecond), visible.Round(time.Millisecond), listTook.Round(time.Millisecond), freshTook.Round(time.Millisecond))

	if len(tools) != 1000 || len(freshTools) != 1000 {
		t.Fatalf("listed %d tools (new session %d), want 1000", len(tools), len(freshTools))
	}
	got := map[string]bool{}
	for name, tool := range tools {
		if !validName.MatchString(name) {
			t.Errorf("invalid tool name %q", name)
		}
		srv, orig := metaOf(tool)
		key := srv + "\x00" + orig
		if !want[key] {
			t.Errorf("%s: _meta %s/%s names no catalog entry", name, srv, orig)
		}
		if got[key] {
			t.Errorf("%s/%s listed twice", srv, orig)
		}
		got[key] = true
		if freshTools[name] == nil {
			t.Errorf("%s is not listed to a new session", name)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d distinct catalog entries listed, want %d", len(got), len(want))
	}
	// Bounds for a shared, loaded 2-core machine; the log above has the real numbers.
	if listTook > 10*time.Second || freshTook > 10*time.Second {
		t.Errorf("listing 1,000 tools took %s (new session %s), want under 10s", listTook, freshTook)
	}
	if visible > 30*time.Second {
		t.Errorf("the catalogs took %s to reach the MCP endpoint", visible)
	}
	// A call of a fake tool is checked against its schema before any bus
	// traffic, and then finds no server: a listed tool nobody serves is an
	// outage (an isError result saying so, design §10), not a hang.
	name := model.NamespacedName("bulk-03", "tool_005")
	res, err := callTool(t, s.ClientSession, name, map[string]any{"n": "five"})
	wantSchemaMismatch(t, res, err, name)
	callStart := time.Now()
	res, err = callTool(t, s.ClientSession, name, map[string]any{"n": 5})
	switch {
	case err != nil:
		t.Errorf("%s without a server: a protocol error (%v), want an isError result", name, err)
	case !res.IsError || !strings.Contains(textOf(res), "temporarily unavailable"):
		t.Errorf("%s (no server behind it): %+v, want an isError result saying it is temporarily unavailable", name, res)
	default:
		t.Logf("%s without a server: %q after %s", name, textOf(res), time.Since(callStart).Round(time.Millisecond))
	}
}

// wantSchemaMismatch checks the answer to arguments that fail tool's input
// schema: a tool result with isError and the gateway's message (SEP-1303).
func wantSchemaMismatch(t *testing.T, res *mcp.CallToolResult, err error, tool string) {
	t.Helper()
	if err != nil || res == nil || !res.IsError || len(res.Content) != 1 {
		t.Errorf("%s with a bad argument: %v %+v, want a tool result with isError", tool, err, res)
		return
	}
	if tc, ok := res.Content[0].(*mcp.TextContent); !ok || !strings.HasPrefix(tc.Text, "arguments do not match the input schema of "+tool+": ") {
		t.Errorf("%s with a bad argument: content %+v", tool, res.Content[0])
	}
}
