package console_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/oauthtest"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/libs/testmcp"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
	"github.com/mcpbus/mcpbus/services/registry/registrytest"
	"github.com/mcpbus/mcpbus/tests/internal/clitest"
	"github.com/mcpbus/mcpbus/tests/internal/npmseed"
)

// What the stand-ins serve and the browser flows look for.
const (
	entryName   = "io.github.mcpbus-test/console-everything" // the Official entry
	search      = "console-everything"                       // finds it (a substring of the name)
	serverSlug  = "console-everything"                       // the slug of its draft config (last segment)
	secretName  = "EVERYTHING_TOKEN"                         // its one required secret
	tool        = "echo"                                     // a tool of server-everything
	profileName = "console"                                  // the chat profile on the scripted model
	chatMessage = "hello from the console"
	chatReply   = "The echo tool answered: hello from the console."
	chatKey     = "sk-console-e2e-6b1f0a"
	smitheryKey = "smk-console-e2e-key"
	everything  = "@modelcontextprotocol/server-everything"
	// flowTimeout only stops a hung walk (each step has its own bound, T
	// in run.mjs): the walk runs beside other suites in make test (-p), and
	// took over 3 minutes on a loaded 2-core machine.
	flowTimeout = 6 * time.Minute

	// The Smithery entry the harness adds: an HTTP connection whose config
	// schema gives the Configure step two required inputs and an optional one
	// (and a secret header, an Authentication field). It is never run.
	smitheryEntry  = "@mcpbus-test/console-notes"
	smitherySearch = "console-notes"

	// The second message of the conversation: the model calls get-sum with
	// a string where the tool's input schema wants a number, so the call
	// fails (✗ and the tool's message), then answers chatFailReply.
	chatFailPrompt = "add one and two with the sum tool"
	failTool       = "get-sum"
	chatFailReply  = "The sum tool rejected the arguments."
	// The third: a long-running operation of slowDuration s against the chat's call
	// timeout of chatCallTimeout, so the call times out (⏱ timed out; the
	// flow accepts the ✗ the chat loop shows when the runner's timeout
	// answers first, see run.mjs).
	chatTimeoutPrompt = "run the long operation"
	slowTool          = "trigger-long-running-operation"
	chatTimeoutReply  = "The long operation did not finish in time."
	// The form step takes as long as it takes: the wait for the user's
	// answer does not count against the call's timeout (libs/deadline; at
	// 12, 25 and 40 s, when it did, loaded CI runs lost the form mid-step).
	chatCallTimeout = 10 * time.Second
	slowDuration    = 14

	// The fourth: the model calls the go-sdk test server's ask tool, whose
	// server asks the user for input (a form elicitation); the flow answers
	// the form in the page, first with an age out of bounds.
	inputServer     = "tm"
	chatInputPrompt = "introduce me to the test server"
	chatInputReply  = "The test server greeted you."

	// The fifth, on holdProfile (whose rules ask before the test server's
	// echo): one step calls echo, held for approval, and ask, whose form
	// comes 2 s later, below the held card; the flow checks the held card's
	// Approve does not move when the form arrives.
	holdProfile    = "console-ask"
	chatHoldPrompt = "echo this once I approve, and ask who I am"
	chatHoldReply  = "Echoed once you approved."

	// A remote server that wants OAuth (libs/oauthtest's authorization
	// server, which approves at once, and go-sdk's protected test server):
	// its enable is refused until the Servers page's Authorize.
	oauthServer = "console-oauth"
	// A second one saved with auth_type oauth and no tokens yet: Authorize
	// shows on its row before anything was tried.
	oauthNew = "console-oauth-new"
	// perUser takes each caller's own OAuth token (auth.per_principal): a
	// call-only key authorizes it for itself on "My authorizations".
	perUser = "console-per-user"
	// A remote server under pin strict whose tool's description drifts on
	// its second tools/list (testmcp.NewDriftServer): the flows restart it
	// and approve the change from its row.
	driftServer = "console-drift"
)

// TestConsoleInBrowser runs tests/console/e2e/run.mjs (the browser flows)
// against a real mcpbus up: the Official registry stand-in serves an entry
// whose install plan runs the pinned server-everything through npx from the
// npm cache `make npm-deps` filled, the Smithery stand-in adds an entry with
// a config schema, and the chat profile's model is scripted per user message
// (see scriptedModel): the first message gets one call of <slug>__echo and
// then a text holding chatReply; chatFailPrompt a call that fails;
// chatTimeoutPrompt one that outlasts --chat-call-timeout; chatInputPrompt a
// call of the test server's ask tool, whose form the flows answer.
func TestConsoleInBrowser(t *testing.T) {
	root := clitest.RepoRoot(t)
	chromium := os.Getenv("MCPBUS_CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	npmDir := filepath.Join(root, "tests", "npm", "node_modules")
	missing := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatalf(format+" (CI=true: the browser test must run)", args...)
		}
		t.Skipf(format, args...)
	}
	if _, err := os.Stat(chromium); err != nil {
		missing("no chromium at %s: install Debian's chromium (apt-get install chromium) or set MCPBUS_CHROMIUM", chromium)
	}
	if _, err := os.Stat(filepath.Join(npmDir, "playwright-core", "package.json")); err != nil {
		missing("playwright-core is not installed in tests/npm: run make npm-deps")
	}
	if _, err := os.Stat(filepath.Join(npmDir, "axe-core", "axe.min.js")); err != nil {
		missing("axe-core is not installed in tests/npm: run make npm-deps")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node is not installed")
	}
	if _, err := os.Stat(filepath.Join(root, "services", "gateway", "console", "dist", "index.html")); err != nil {
		t.Fatal("the console is not built (services/gateway/console/dist/index.html is missing): run make console")
	}
	flows := filepath.Join(root, "tests", "console", "e2e", "run.mjs")
	if _, err := os.Stat(flows); err != nil {
		t.Fatalf("the browser flows are missing: %v", err)
	}
	version := pinnedVersion(t, root, everything)
	if _, err := os.Stat(filepath.Join(npmDir, filepath.FromSlash(everything), "package.json")); err != nil {
		t.Fatalf("%s is not installed in tests/npm (its tarball must be in the npm cache for npx): run make npm-deps", everything)
	}

	// The runner gives the server an npm cache of its own: seeded from the
	// shared one, npx installs offline (it downloaded 54 MB otherwise, 50 s
	// of the enable step on a loaded CI).
	npmseed.Place(t, serverSlug, "")

	bin := mcpbusBin
	off := officialWithEntry(t, root, version)
	smi := smitheryWithEntry(t)
	llm := scriptedModel(t)

	otlp := otlpSink(t)

	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	upEnv := clitest.Env(
		"SMITHERY_API_KEY="+smitheryKey,
		// The runner passes npm_config_* to npx: the pinned package comes
		// from the npm cache, without the registry when its metadata is cached.
		"npm_config_prefer_offline=true", "npm_config_update_notifier=false", "npm_config_fund=false",
		"npm_config_audit=false", "npm_config_loglevel=error",
		// Tracing on, so calls carry trace ids the Activity page shows.
		"OTEL_EXPORTER_OTLP_ENDPOINT="+otlp.URL, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_SDK_DISABLED=false", "OTEL_TRACES_EXPORTER=otlp")
	// No ports: up binds free ones and StartUp reads them from its log (a
	// port picked here could be taken by another package before up binds it).
	upArgs := []string{"--data-dir", data,
		"--official-registry-url", off.URL, "--smithery-registry-url", smi.URL,
		// Links only (the flows never follow them): Activity links trace ids here.
		"--gateway-jaeger-url", otlp.URL + "/jaeger",
		// Short, so a chat tool call can time out within the test; the
		// runner's own default (30 s) above it, so the chat's is the one.
		"--chat-call-timeout", chatCallTimeout.String(), "--call-timeout", "90s"}
	// SIGTERM first at the end: mcpbus up stops its servers (npx and node) itself.
	up := clitest.StartUp(t, bin, clitest.UpOptions{Dir: dir, Env: upEnv, Args: upArgs, StopGrace: 15 * time.Second})
	baseURL := up.HTTPURL()
	waitReady(t, up, baseURL)
	key, err := os.ReadFile(filepath.Join(data, "admin.key"))
	if err != nil {
		t.Fatalf("the admin key: %v", err)
	}
	adminKey := strings.TrimSpace(string(key))

	// The remote server that wants OAuth, added as an operator does.
	as := oauthtest.Start(t, oauthtest.Options{})
	protected := testmcp.ServeProtected(t, oauthServer, as)
	if r := up.CLI().Run(t, "servers", "add", oauthServer, "--url", protected); r.Code != 0 {
		t.Fatalf("servers add %s: %s", oauthServer, r)
	}
	newFile := filepath.Join(dir, oauthNew+".json")
	if err := os.WriteFile(newFile, fmt.Appendf(nil, `{"name":%q,"auth_type":"oauth","package":{"type":"http","identifier":%q},"transport":{"type":"http","url":%q}}`, oauthNew, protected, protected), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := up.CLI().Run(t, "servers", "add", oauthNew, "-f", newFile); r.Code != 0 {
		t.Fatalf("servers add %s: %s", oauthNew, r)
	}

	if r := up.CLI().Run(t, "servers", "add", perUser, "--url", protected, "--per-principal"); r.Code != 0 {
		t.Fatalf("servers add %s: %s", perUser, r)
	}
	var callKey struct {
		Key string `json:"key"`
	}
	if r := up.CLI().Run(t, "--json", "keys", "create", "console-call", "--scope", "call"); r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &callKey) != nil || callKey.Key == "" {
		t.Fatalf("keys create: %s", r)
	}

	// The chat profile, as an operator makes it (its model key on stdin).
	r := up.CLI().RunInput(t, chatKey+"\n", "profiles", "add", profileName, "--provider", "openai", "--model", "scripted",
		"--base-url", llm.URL+"/v1/", "--api-key-stdin")
	if r.Code != 0 {
		t.Fatalf("profiles add: %s", r)
	}
	r = up.CLI().RunInput(t, chatKey+"\n", "profiles", "add", holdProfile, "--provider", "openai", "--model", "scripted",
		"--base-url", llm.URL+"/v1/", "--api-key-stdin", "--ask", inputServer+"__echo")
	if r.Code != 0 {
		t.Fatalf("profiles add %s: %s", holdProfile, r)
	}

	// The go-sdk test server, whose ask tool asks the user for input.
	if r := up.CLI().Run(t, "servers", "add", inputServer, "--binary", testServer, "--enabled"); r.Code != 0 {
		t.Fatalf("servers add %s: %s", inputServer, r)
	}

	// Pinned at its first list; the flows' restart makes it drift.
	driftFile := filepath.Join(dir, driftServer+".json")
	drift := testmcp.NewDriftServer(driftServer)
	driftURL := testmcp.ServeServerHTTP(t, drift, nil, nil)
	if err := os.WriteFile(driftFile, fmt.Appendf(nil, `{"name":%q,"pin":"strict","enabled":true,"runtime":{"eager":true},"package":{"type":"http","identifier":%q},"transport":{"type":"http","url":%q}}`, driftServer, driftURL, driftURL), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := up.CLI().Run(t, "servers", "add", driftServer, "-f", driftFile); r.Code != 0 {
		t.Fatalf("servers add %s: %s", driftServer, r)
	}

	artifacts := filepath.Join(root, "artifacts", "console")
	if err := os.RemoveAll(artifacts); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	env := clitest.Env(
		"MCPBUS_URL="+baseURL,
		"MCPBUS_ADMIN_KEY="+adminKey,
		"MCPBUS_CHROMIUM="+chromium,
		"MCPBUS_ARTIFACTS="+artifacts,
		"MCPBUS_SEARCH="+search,
		"MCPBUS_ENTRY="+entryName,
		"MCPBUS_SECRET_NAME="+secretName,
		"MCPBUS_SERVER_SLUG="+serverSlug,
		"MCPBUS_TOOL="+tool,
		"MCPBUS_PROFILE="+profileName,
		"MCPBUS_CHAT_MESSAGE="+chatMessage,
		"MCPBUS_CHAT_REPLY="+chatReply,
		"MCPBUS_SMITHERY_SEARCH="+smitherySearch,
		"MCPBUS_SMITHERY_ENTRY="+smitheryEntry,
		"MCPBUS_CHAT_FAIL_PROMPT="+chatFailPrompt,
		"MCPBUS_CHAT_FAIL_TOOL="+failTool,
		"MCPBUS_CHAT_FAIL_REPLY="+chatFailReply,
		"MCPBUS_CHAT_TIMEOUT_PROMPT="+chatTimeoutPrompt,
		"MCPBUS_CHAT_TIMEOUT_TOOL="+slowTool,
		"MCPBUS_CHAT_TIMEOUT_REPLY="+chatTimeoutReply,
		fmt.Sprintf("MCPBUS_CHAT_TIMEOUT_DURATION=%d", slowDuration),
		fmt.Sprintf("MCPBUS_CHAT_CALL_TIMEOUT_MS=%d", chatCallTimeout.Milliseconds()),
		"MCPBUS_CHAT_INPUT_PROMPT="+chatInputPrompt,
		"MCPBUS_CHAT_INPUT_TOOL="+inputServer+".ask",
		"MCPBUS_CHAT_INPUT_REPLY="+chatInputReply,
		"MCPBUS_CHAT_HOLD_PROFILE="+holdProfile,
		"MCPBUS_CHAT_HOLD_PROMPT="+chatHoldPrompt,
		"MCPBUS_CHAT_HOLD_REPLY="+chatHoldReply,
		"MCPBUS_OAUTH_SERVER="+oauthServer,
		"MCPBUS_OAUTH_NEW_SERVER="+oauthNew,
		"MCPBUS_PER_USER_SERVER="+perUser,
		"MCPBUS_CALL_KEY="+callKey.Key,
		"MCPBUS_DRIFT_SERVER="+driftServer,
		"MCPBUS_DRIFT_BEFORE="+testmcp.DriftBefore,
		"MCPBUS_DRIFT_AFTER="+testmcp.DriftAfter,
		"MCPBUS_DRIFT_ADD_URL="+toolAdder(t, drift).URL,
		"MCPBUS_TAMPER_URL="+tamperer(t, up.NATSURL(), data).URL,
	)
	// The stand-ins above close after the up, not before it: it holds
	// connections to them.
	up.EndBefore(t, 15*time.Second)
	if err := runFlows(t, node, root, flows, env); err != nil {
		t.Errorf("browser flows: %v (screenshots and traces in %s)", err, artifacts) // the cleanup shows the up's log
		return
	}
	t.Logf("browser flows passed; screenshots in %s", artifacts)
}

// toolAdder serves POST ?name=<tool>: s gains a tool of that name (its
// sessions are told with notifications/tools/list_changed), which a server
// under pin strict holds for review as changed from nothing. The flows add
// one while another change is on screen, as a malicious server would.
func toolAdder(t *testing.T, s *mcp.Server) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.URL.Query().Get("name")
		if r.Method != http.MethodPost || name == "" {
			http.Error(w, "POST ?name=<tool>", http.StatusBadRequest)
			return
		}
		mcp.AddTool(s, &mcp.Tool{Name: name, Description: "Added while a change was under review"},
			func(context.Context, *mcp.CallToolRequest, testmcp.EchoIn) (*mcp.CallToolResult, any, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "added"}}}, nil, nil
			})
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(func() { closeNow(srv) })
	return srv
}

// runFlows runs node on the flows with env, each output line going to
// t.Log as it comes, within flowTimeout. Chromium is the flows' child: the
// whole process group is killed when time runs out.
func runFlows(t *testing.T, node, root, flows string, env []string) error {
	ctx, cancel := context.WithTimeout(t.Context(), flowTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, flows)
	cmd.Dir = root
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	lines := make(chan struct{})
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			t.Log("run.mjs: " + sc.Text())
		}
		_, _ = io.Copy(io.Discard, pr) // a line over 1 MiB: drain the rest
	}()
	start := time.Now()
	err := cmd.Run()
	_ = pw.Close()
	<-lines
	// Whatever the flows left running (chromium) goes with them.
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if ctx.Err() == context.DeadlineExceeded {
		return fmt.Errorf("node %s did not finish within %s", filepath.Base(flows), flowTimeout)
	}
	if err != nil {
		return fmt.Errorf("node %s: %w after %s", filepath.Base(flows), err, time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// otlpSink stands in for an OTLP/HTTP collector: it takes every export
// (an empty body is an empty Export*ServiceResponse) and keeps nothing.
func otlpSink(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(func() { closeNow(srv) })
	return srv
}

// officialWithEntry serves the recorded Official sample plus the test's
// entry: the pinned server-everything from npm with one required secret.
func officialWithEntry(t *testing.T, root, version string) *registrytest.Official {
	t.Helper()
	entries, err := registrytest.LoadOfficial(filepath.Join(root, "services", "registry", "testdata", "official-sample.json"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)
	entry, err := json.Marshal(map[string]any{
		"server": map[string]any{
			"$schema":     "https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json",
			"name":        entryName,
			"description": "The MCP reference server (echo, sums, resources and prompts), for the web console's browser test.",
			"version":     version,
			"packages": []any{map[string]any{
				"registryType": "npm",
				"identifier":   everything,
				"version":      version,
				"runtimeHint":  "npx",
				"transport":    map[string]any{"type": "stdio"},
				"environmentVariables": []any{map[string]any{
					"name":        secretName,
					"description": "A token the test sets (any value; the server ignores it).",
					"isRequired":  true,
					"isSecret":    true,
				}},
			}},
		},
		"_meta": map[string]any{"io.modelcontextprotocol.registry/official": map[string]any{
			"status": "active", "publishedAt": now, "updatedAt": now, "isLatest": true,
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	o, err := registrytest.NewOfficial(append(entries, entry))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Close)
	return o
}

// smitheryWithEntry serves the recorded Smithery sample plus the test's
// entry: a hosted (HTTP) server whose connection's config schema has a
// required string without a default (workspace), a required choice with one
// (units), an optional integer with one (maxResults) and a secret read from
// a header (apiKey → X-Notes-Key, a credential rather than an input).
func smitheryWithEntry(t *testing.T) *registrytest.Smithery {
	t.Helper()
	sample, err := registrytest.LoadSmithery(filepath.Join(clitest.RepoRoot(t), "services", "registry", "testdata", "smithery-sample.json"))
	if err != nil {
		t.Fatal(err)
	}
	row := map[string]any{
		"qualifiedName": smitheryEntry, "displayName": "Console Notes",
		"description": "A notes server for the web console's browser test (never run).",
		"verified":    false, "useCount": 7, "remote": true, "isDeployed": true,
		"createdAt": "2026-01-05T10:00:00.000Z", "homepage": "https://smithery.ai/server/" + smitheryEntry,
	}
	detail := map[string]any{
		"qualifiedName": smitheryEntry, "displayName": "Console Notes",
		"description": row["description"], "remote": true,
		"connections": []any{map[string]any{
			"type":          "http",
			"deploymentUrl": "https://notes.mcpbus-test.example/mcp",
			"configSchema": map[string]any{
				"type": "object",
				"properties": map[string]any{
					"workspace":  map[string]any{"type": "string", "description": "The workspace whose notes the server reads."},
					"maxResults": map[string]any{"type": "integer", "default": 20, "description": "How many notes a search returns."},
					"units":      map[string]any{"type": "string", "enum": []any{"metric", "imperial"}, "default": "metric", "description": "Units in summaries."},
					"apiKey":     map[string]any{"type": "string", "description": "The notes service key.", "x-from": map[string]any{"header": "X-Notes-Key"}},
				},
				"required": []any{"workspace", "units", "apiKey"},
			},
		}},
		"tools":    []any{map[string]any{"name": "search_notes", "description": "Searches the notes."}},
		"security": map[string]any{"scanPassed": true},
	}
	extra, err := json.Marshal(map[string]any{
		"list":    map[string]any{"servers": []any{row}},
		"details": map[string]any{smitheryEntry: detail},
	})
	if err != nil {
		t.Fatal(err)
	}
	var more registrytest.SmitheryData
	if err := json.Unmarshal(extra, &more); err != nil {
		t.Fatal(err)
	}
	sample.Merge(&more)
	s, err := registrytest.NewSmithery(sample, smitheryKey)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// scriptedModel is the chat profile's model: a front that sends each
// request to the scripted stand-in for its last user message, so every
// message of the flows gets its own script whatever order or retries the
// flows take. Each script ends with a text it repeats to any later request.
func scriptedModel(t *testing.T) *httptest.Server {
	t.Helper()
	script := func(calls []llmtest.ToolCall, reply string) *url.URL {
		s := llmtest.Start(t, chatKey)
		s.Enqueue(llmtest.ToolCalls(calls...), llmtest.Text(reply))
		s.Always(llmtest.Text(reply))
		u, err := url.Parse(s.URL)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	// Each stand-in numbers its call ids from 1: the ids are set here, one
	// per call, as a model's are unique within a conversation.
	call := func(id, name, args string) []llmtest.ToolCall {
		return []llmtest.ToolCall{{ID: id, Name: serverSlug + "__" + name, Arguments: args}}
	}
	byPrompt := map[string]*url.URL{
		chatMessage: script(call("call_echo", tool, fmt.Sprintf(`{"message":%q}`, chatMessage)), chatReply),
		// a must be a number: the tool's input schema (zod) rejects it.
		chatFailPrompt:    script(call("call_sum", failTool, `{"a":"one","b":2}`), chatFailReply),
		chatTimeoutPrompt: script(call("call_slow", slowTool, fmt.Sprintf(`{"duration":%d,"steps":%d}`, slowDuration, slowDuration)), chatTimeoutReply),
		chatInputPrompt: script([]llmtest.ToolCall{{ID: "call_ask", Name: inputServer + "__ask", Arguments: `{"message":"Who are you?"}`}},
			chatInputReply),
		// A long message: the held card is tall, the log overflows.
		chatHoldPrompt: script([]llmtest.ToolCall{
			{ID: "call_held_echo", Name: inputServer + "__echo", Arguments: fmt.Sprintf(`{"message":%q}`, strings.Repeat("held until approved ", 30))},
			{ID: "call_late_ask", Name: inputServer + "__ask", Arguments: `{"message":"Who is approving?","ms":2000}`}},
			chatHoldReply),
	}
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		prompt := lastUserText(body)
		target, ok := byPrompt[prompt]
		if !ok {
			t.Errorf("the scripted model got a message it has no script for: %q", prompt)
			http.Error(w, "no script for this message", http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		p := httputil.NewSingleHostReverseProxy(target)
		p.FlushInterval = -1 // stream the SSE events as they come
		p.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { closeNow(front) })
	return front
}

// closeNow closes a stand-in with its connections: a request still under
// way at the end (an export, a streamed answer) would hold Close 5 s.
func closeNow(srv *httptest.Server) {
	srv.CloseClientConnections()
	srv.Close()
}

// lastUserText is the text of the last user message of an OpenAI chat
// completions request (content as a string or as text parts).
func lastUserText(body []byte) string {
	var req struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if json.Unmarshal(body, &req) != nil {
		return ""
	}
	for i := len(req.Messages) - 1; i >= 0; i-- {
		m := req.Messages[i]
		if m.Role != "user" {
			continue
		}
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			return s
		}
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		_ = json.Unmarshal(m.Content, &parts)
		var b strings.Builder
		for _, p := range parts {
			b.WriteString(p.Text)
		}
		return b.String()
	}
	return ""
}

// pinnedVersion is the version tests/npm/package.json pins pkg to.
func pinnedVersion(t *testing.T, root, pkg string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "tests", "npm", "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	if err := json.Unmarshal(data, &p); err != nil || p.Dependencies[pkg] == "" {
		t.Fatalf("tests/npm/package.json does not pin %s: %v", pkg, err)
	}
	return p.Dependencies[pkg]
}

// waitReady waits until the gateway answers /readyz (NATS, a runner and the
// config service up) and the chat service answers, or mcpbus up exits.
func waitReady(t *testing.T, up *clitest.Up, baseURL string) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	testkit.WaitFor(t, 60*time.Second, func() (bool, string) {
		if up.Exited() {
			t.Fatalf("mcpbus up exited: %v", up.Err()) // the cleanup shows its log
		}
		resp, err := client.Get(baseURL + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Sprintf("GET /readyz: %d %s", resp.StatusCode, body)
	})
}
