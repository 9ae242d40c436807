package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/services/gateway/mcpserver"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/tests/internal/clitest"
	"github.com/mcpbus/mcpbus/tools/mcpbus/stack"
)

// validName is what every tool name the gateway lists must match (LLM APIs).
var validName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// mcpEnv is the whole system as `mcpbus up` runs it in process, gateway
// included (stack.Options.Gateway), on an embedded NATS without a listener.
type mcpEnv struct {
	st    *stack.Stack
	url   string // http://<gateway addr>
	admin string // the bootstrap admin key
	logs  *testkit.LogBuffer
}

// startMCP starts the stack with a gateway configured by gw (its Addr is
// always a free loopback port). The stack's log is shown if the test fails.
func startMCP(t *testing.T, gw gateway.Options) *mcpEnv {
	t.Helper()
	logs := &testkit.LogBuffer{}
	// Registered first, so it runs last: after the stack has stopped.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("stack log (tail):\n%s", logs.Tail(12000))
		}
	})
	gw.Addr = "127.0.0.1:0"
	if gw.ShutdownTimeout == 0 {
		gw.ShutdownTimeout = 4 * time.Second
	}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := stack.Start(ctx, stack.Options{
		DataDir: t.TempDir(), InProcessOnly: true, Logger: log,
		// npm servers may take long to boot on a loaded machine.
		Runner:  runner.Options{StopGrace: 100 * time.Millisecond, StopTimeout: 3 * time.Second, StartTimeout: 90 * time.Second},
		Gateway: &gw,
	})
	if err != nil {
		t.Fatalf("starting the stack: %v", err)
	}
	t.Cleanup(st.Close)
	if st.Gateway == nil {
		t.Fatal("stack.Start with Options.Gateway returned no gateway")
	}
	var key []byte
	if !gw.NoAuth { // --no-auth: no admin key
		if key, err = os.ReadFile(st.Gateway.AdminKeyPath()); err != nil {
			t.Fatalf("reading the admin key: %v", err)
		}
	}
	return &mcpEnv{st: st, url: "http://" + st.Gateway.Addr(), admin: strings.TrimSpace(string(key)), logs: logs}
}

// ctxT is a context that ends after d or with the test.
func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// enable creates cfg disabled through the config service, then enables it
// there (which starts it and waits for it), and returns its slug.
func (e *mcpEnv) enable(t *testing.T, cfg model.McpConfig) string {
	t.Helper()
	cfg.Enabled = false
	created, err := e.st.Client.CreateConfig(ctxT(t, 30*time.Second), cfg, nil)
	if err != nil {
		t.Fatalf("creating config %s: %v", cfg.Name, err)
	}
	start := time.Now()
	got, err := e.st.Client.SetEnabled(ctxT(t, 3*time.Minute), created.Slug, true)
	if err != nil {
		t.Fatalf("enabling %s: %v", created.Slug, err)
	}
	if !got.Enabled {
		t.Fatalf("enable %s returned a disabled config: %+v", created.Slug, got)
	}
	t.Logf("%s enabled and running after %s", created.Slug, time.Since(start).Round(time.Millisecond))
	return created.Slug
}

// testServerConfig is the go-sdk test server (libs/testmcp) with SERVER_ID set
// to name, so its env tool tells which server a call reached.
func testServerConfig(name string) model.McpConfig {
	return model.McpConfig{
		Name:      name,
		Package:   model.Package{Type: model.PackageBinary, Identifier: testServer, Args: []string{"-name", name}},
		Transport: model.Transport{Type: model.TransportStdio},
		EnvVars:   map[string]model.EnvVar{"SERVER_ID": {Value: name}},
	}
}

// waitStarted waits until the test server has started n runs of tool (the
// lines "<tool> <pid>" its sleep appends to TESTMCP_RUN_FILE): a call
// cancelled before it reaches the server never reaches it, so a test of
// cancellation waits for this rather than for a fixed time.
func waitStarted(t *testing.T, runFile, tool string, n int) {
	t.Helper()
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
		data, _ := os.ReadFile(runFile)
		got := 0
		for line := range strings.Lines(string(data)) {
			if name, _, _ := strings.Cut(line, " "); name == tool {
				got++
			}
		}
		return got >= n, fmt.Sprintf("the server started %d runs of %s, want %d", got, tool, n)
	})
}

// binaryConfig runs a binary over stdio.
func binaryConfig(name, path string, args ...string) model.McpConfig {
	return model.McpConfig{
		Name:      name,
		Package:   model.Package{Type: model.PackageBinary, Identifier: path, Args: args},
		Transport: model.Transport{Type: model.TransportStdio},
	}
}

// npmBin is an installed pinned npm server (`make npm-deps`). Missing is a
// failure, never a skip: these tests prove real published servers work.
func npmBin(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(clitest.RepoRoot(t), "tests", "npm", "node_modules", ".bin", name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the pinned npm server %s is not installed (%v): run `make npm-deps` in %s", name, err, clitest.RepoRoot(t))
	}
	return p
}

// createKey makes an API key through the bus (mcp.v1.keys.create), as the
// CLI does.
func (e *mcpEnv) createKey(t *testing.T, req model.KeyCreateRequest) model.KeyCreateReply {
	t.Helper()
	var out model.KeyCreateReply
	subj := bus.NewSubjects("").Service("keys", "create")
	if err := bus.RequestJSON(ctxT(t, 20*time.Second), e.st.Conn, subj, req, &out, 15*time.Second); err != nil {
		t.Fatalf("%s: %v", subj, err)
	}
	if out.Key == "" || out.ID == "" {
		t.Fatalf("%s returned no key: %+v", subj, out.APIKey)
	}
	return out
}

// authTransport adds the bearer key (when set) and records every answer's
// status and WWW-Authenticate challenge.
type authTransport struct {
	key  string
	base http.RoundTripper

	mu         sync.Mutex
	statuses   []int
	challenges []string
}

func (a *authTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if a.key != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+a.key)
	}
	resp, err := a.base.RoundTrip(r)
	if err == nil {
		a.mu.Lock()
		a.statuses = append(a.statuses, resp.StatusCode)
		if c := resp.Header.Get("WWW-Authenticate"); c != "" {
			a.challenges = append(a.challenges, c)
		}
		a.mu.Unlock()
	}
	return resp, err
}

// seen returns the recorded statuses and challenges.
func (a *authTransport) seen() ([]int, []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.statuses), slices.Clone(a.challenges)
}

// mcpSession is a go-sdk client session with its notifications recorded.
type mcpSession struct {
	*mcp.ClientSession
	http        *authTransport
	listChanged chan struct{}
	// updated gets the URI of each notifications/resources/updated.
	updated chan string

	mu       sync.Mutex
	progress []*mcp.ProgressNotificationParams
	gotProg  chan struct{}
}

func (s *mcpSession) progressSeen() []*mcp.ProgressNotificationParams {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.progress)
}

// drainListChanged forgets the tools/list_changed notifications seen so far.
func (s *mcpSession) drainListChanged() {
	for {
		select {
		case <-s.listChanged:
		default:
			return
		}
	}
}

func newRecordingClient(s *mcpSession) *mcp.Client {
	return mcp.NewClient(&mcp.Implementation{Name: "gateway-e2e", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case s.listChanged <- struct{}{}:
			default:
			}
		},
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			select {
			case s.updated <- req.Params.URI:
			default:
			}
		},
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			s.mu.Lock()
			s.progress = append(s.progress, req.Params)
			s.mu.Unlock()
			select {
			case s.gotProg <- struct{}{}:
			default:
			}
		},
	})
}

// dialMCP opens a Streamable HTTP session to the gateway's /mcp as key ("" =
// no Authorization header), of go-sdk's newest protocol (2026-07-28: no
// session, every request on its own). The error is returned, for the auth
// tests.
func dialMCP(t *testing.T, baseURL, key string) (*mcpSession, error) {
	t.Helper()
	return dialMCPAt(t, baseURL, key, "")
}

// dialMCPAt is dialMCP speaking protocol version ("": go-sdk's newest).
func dialMCPAt(t *testing.T, baseURL, key, version string) (*mcpSession, error) {
	t.Helper()
	s := &mcpSession{listChanged: make(chan struct{}, 64), gotProg: make(chan struct{}, 1), updated: make(chan string, 16)}
	s.http = &authTransport{key: key, base: http.DefaultTransport}
	tr := &mcp.StreamableClientTransport{Endpoint: baseURL + "/mcp", MaxRetries: -1,
		HTTPClient: &http.Client{Transport: s.http}}
	cs, err := newRecordingClient(s).Connect(ctxT(t, 30*time.Second), tr, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		return s, err
	}
	t.Cleanup(func() { _ = cs.Close() })
	s.ClientSession = cs
	return s, nil
}

// connectMCP is dialMCP that fails the test on error.
func connectMCP(t *testing.T, baseURL, key string) *mcpSession {
	t.Helper()
	return connectMCPAt(t, baseURL, key, "")
}

// connectMCPAt is dialMCPAt that fails the test on error.
func connectMCPAt(t *testing.T, baseURL, key, version string) *mcpSession {
	t.Helper()
	s, err := dialMCPAt(t, baseURL, key, version)
	if err != nil {
		st, ch := s.http.seen()
		t.Fatalf("connecting to %s/mcp: %v (HTTP statuses %v, challenges %q)", baseURL, err, st, ch)
	}
	return s
}

// listTools lists every tool (all pages) by name.
func listTools(t *testing.T, s *mcp.ClientSession) map[string]*mcp.Tool {
	t.Helper()
	out, err := tryListTools(ctxT(t, 60*time.Second), s)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	return out
}

func tryListTools(ctx context.Context, s *mcp.ClientSession) (map[string]*mcp.Tool, error) {
	out := map[string]*mcp.Tool{}
	for tool, err := range s.Tools(ctx, nil) {
		if err != nil {
			return nil, err
		}
		if _, dup := out[tool.Name]; dup {
			return nil, fmt.Errorf("tool %q listed twice", tool.Name)
		}
		out[tool.Name] = tool
	}
	return out, nil
}

// waitList lists tools until cond holds, failing after within.
func waitList(t *testing.T, s *mcp.ClientSession, within time.Duration, what string, cond func(map[string]*mcp.Tool) bool) map[string]*mcp.Tool {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		tools := listTools(t, s)
		if cond(tools) {
			return tools
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s the tool list never %s: %v", within, what, sortedNames(tools))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitListChanged waits for a tools/list_changed notification, then for a
// list satisfying cond (another notification may be needed first: the catalog
// can change more than once while a server starts).
func waitListChanged(t *testing.T, s *mcpSession, within time.Duration, what string, cond func(map[string]*mcp.Tool) bool) map[string]*mcp.Tool {
	t.Helper()
	deadline := time.After(within)
	var tools map[string]*mcp.Tool
	for {
		select {
		case <-s.listChanged:
		case <-deadline:
			t.Fatalf("no tools/list_changed after which the list %s within %s (last list %v)", what, within, sortedNames(tools))
		}
		tools = listTools(t, s.ClientSession)
		if cond(tools) {
			return tools
		}
	}
}

func sortedNames[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// callTool calls a tool with a bounded context.
func callTool(t *testing.T, s *mcp.ClientSession, name string, args any) (*mcp.CallToolResult, error) {
	t.Helper()
	return s.CallTool(ctxT(t, 60*time.Second), &mcp.CallToolParams{Name: name, Arguments: args})
}

// callText calls a tool and returns its text; an error or isError fails the test.
func callText(t *testing.T, s *mcp.ClientSession, name string, args any) string {
	t.Helper()
	res, err := callTool(t, s, name, args)
	if err != nil {
		t.Fatalf("tools/call %s: %v", name, err)
	}
	text := textOf(res)
	if res.IsError {
		t.Fatalf("tools/call %s: tool error: %s", name, text)
	}
	return text
}

// textOf joins the text content of a result.
func textOf(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// metaOf reads the server and original tool name the gateway put in _meta.
func metaOf(tool *mcp.Tool) (server, original string) {
	server, _ = tool.Meta[mcpserver.MetaServer].(string)
	original, _ = tool.Meta[mcpserver.MetaTool].(string)
	return server, original
}

// byOrigin finds the listed tool of server whose original name is original.
func byOrigin(tools map[string]*mcp.Tool, server, original string) *mcp.Tool {
	for _, tool := range tools {
		if s, o := metaOf(tool); s == server && o == original {
			return tool
		}
	}
	return nil
}

// httpDo sends one request to the gateway with key ("" = none).
func httpDo(t *testing.T, method, url, key string, body any) reply {
	t.Helper()
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctxT(t, 90*time.Second), method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: data}
}

// goBuild builds a Go package (pattern, run in dir) into a temp dir.
func goBuild(t *testing.T, dir, pkg, name string) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build %s: %v", pkg, err)
	}
	bin := filepath.Join(t.TempDir(), name)
	cmd := exec.CommandContext(ctxT(t, 5*time.Minute), gobin, "build", "-o", bin, pkg)
	cmd.Dir = dir
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	t.Logf("built %s in %s", pkg, time.Since(start).Round(time.Millisecond))
	return bin
}
