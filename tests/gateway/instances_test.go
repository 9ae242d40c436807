package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/tests/internal/clitest"
)

// Several gateway instances on one bus, as a load balancer without sticky
// routing spreads one client over them (docs/operating.md, "Several
// gateway instances").

// startTestServer creates the go-sdk test server as "slow" through the REST
// API of e and waits for its tools.
func startTestServer(t *testing.T, e *env, name string) {
	t.Helper()
	cfg := model.McpConfig{Name: name, Enabled: true,
		Package:   model.Package{Type: model.PackageBinary, Identifier: testServer, Args: []string{"-name", name}},
		Transport: model.Transport{Type: model.TransportStdio}}
	if r := e.do("POST", "/api/v1/servers", model.ConfigCreateRequest{Config: cfg}); r.status != http.StatusCreated {
		t.Fatalf("create server: %d %s", r.status, r.body)
	}
	e.waitState(name, model.StateRunning)
	waitTools(t, e, func(names []string) bool { return contains(names, name+"__sleep") })
}

// redirectTransport sends every request to another host once moved.
type redirectTransport struct {
	key  string
	mu   sync.Mutex
	host string // "": as addressed
}

func (r *redirectTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+r.key)
	r.mu.Lock()
	if r.host != "" {
		req.URL.Host, req.Host = r.host, r.host
	}
	r.mu.Unlock()
	return http.DefaultTransport.RoundTrip(req)
}

func (r *redirectTransport) moveTo(base string) {
	u, _ := url.Parse(base)
	r.mu.Lock()
	r.host = u.Host
	r.mu.Unlock()
}

// TestSessionOnAnotherInstance: a 2025-11-25 session lives in the instance
// that made it. Its requests on another instance (or on the same one after
// a restart) get HTTP 404, every method of them, so the client knows to
// initialize again; go-sdk's client ends the session with ErrSessionMissing
// at once rather than hanging.
func TestSessionOnAnotherInstance(t *testing.T) {
	t.Parallel()
	e := start(t)
	startTestServer(t, e, "slow")
	e2 := runGateway(t, e.st, "test-gateway-2", e.dir, e.logs, gateway.Options{})

	hdr := map[string]string{"Authorization": "Bearer " + e.admin, "Content-Type": "application/json",
		"Accept": "application/json, text/event-stream", "Mcp-Protocol-Version": "2025-11-25"}
	r := rawDo(t, http.MethodPost, e.url+"/mcp", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`, hdr)
	sid := r.header.Get("Mcp-Session-Id")
	if r.status != http.StatusOK || sid == "" {
		t.Fatalf("initialize: %d %s", r.status, r.body)
	}
	hdr["Mcp-Session-Id"] = sid
	if r := rawDo(t, http.MethodPost, e.url+"/mcp", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, hdr); r.status != http.StatusAccepted {
		t.Fatalf("initialized: %d %s", r.status, r.body)
	}
	for _, c := range []struct{ method, body string }{
		{http.MethodPost, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`},
		{http.MethodPost, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"slow__echo","arguments":{"message":"hi"}}}`},
		{http.MethodPost, `{"jsonrpc":"2.0","id":4,"method":"ping"}`},
		{http.MethodGet, ""},
		{http.MethodDelete, ""},
	} {
		if r := rawDo(t, c.method, e2.url+"/mcp", c.body, hdr); r.status != http.StatusNotFound {
			t.Errorf("%s %s on the other instance: %d %s, want 404", c.method, c.body, r.status, r.body)
		}
	}
	// The session is still whole on its own instance.
	if r := rawDo(t, http.MethodPost, e.url+"/mcp", `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"slow__echo","arguments":{"message":"still here"}}}`, hdr); r.status != http.StatusOK || !strings.Contains(string(r.body), "still here") {
		t.Fatalf("the session on its instance: %d %s", r.status, r.body)
	}

	// go-sdk's client: the next request after the move fails at once with
	// ErrSessionMissing (it does not initialize again by itself).
	tr := &redirectTransport{key: e.admin}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "moved", Version: "1"}, nil).Connect(ctxT(t, 30*time.Second),
		&mcp.StreamableClientTransport{Endpoint: e.url + "/mcp", MaxRetries: -1, HTTPClient: &http.Client{Transport: tr}},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tr.moveTo(e2.url)
	begin := time.Now()
	_, err = cs.CallTool(ctxT(t, 20*time.Second), &mcp.CallToolParams{Name: "slow__echo", Arguments: map[string]any{"message": "moved"}})
	if !errors.Is(err, mcp.ErrSessionMissing) || time.Since(begin) > 5*time.Second {
		t.Fatalf("a call after the move: %v after %s, want ErrSessionMissing at once", err, time.Since(begin))
	}
}

// TestMRTRStateOfAnotherCaller: a requestState is bound to its caller. A
// retry of another key with it, on the holding instance or another, is
// refused, and the round trip it names goes on for its caller, who
// completes it.
func TestMRTRStateOfAnotherCaller(t *testing.T) {
	t.Parallel()
	e := start(t)
	startTestServer(t, e, "asker")
	e2 := runGateway(t, e.st, "test-gateway-2", e.dir, e.logs, gateway.Options{})
	eve := e.do("POST", "/api/v1/keys", model.KeyCreateRequest{Name: "eve", Scopes: []string{"call"}})
	var eveKey model.KeyCreateReply
	eve.decode(t, &eveKey)
	if eve.status != http.StatusCreated || eveKey.Key == "" {
		t.Fatalf("creating eve's key: %d %s", eve.status, eve.body)
	}

	first := modernCall(t, e.url, e.admin, "asker__ask", `"arguments":{"message":"Your name?"}`)
	var requests map[string]json.RawMessage
	var state string
	if json.Unmarshal(first["inputRequests"], &requests) != nil || len(requests) != 1 || json.Unmarshal(first["requestState"], &state) != nil {
		t.Fatalf("first round: %v", first)
	}
	var answers []string
	for id := range requests {
		answers = append(answers, fmt.Sprintf(`%q:{"action":"accept","content":{"name":"Ada"}}`, id))
	}
	retry := fmt.Sprintf(`"arguments":{"message":"Your name?"},"requestState":%q,"inputResponses":{%s}`, state, strings.Join(answers, ","))
	for _, url := range []string{e.url, e2.url} {
		if r := modernRaw(t, url, eveKey.Key, "asker__ask", retry); !strings.Contains(string(r.body), "another caller") {
			t.Fatalf("eve's retry on %s: %d %s, want the error that it is another caller's", url, r.status, r.body)
		}
	}
	final := modernCall(t, e2.url, e.admin, "asker__ask", retry)
	if !strings.Contains(string(final["content"]), "hello Ada") {
		t.Fatalf("the caller's own retry after eve's: %v", final)
	}
}

// TestRevokedKeyStreamsEndOnEveryInstance: a key revoked through one
// instance loses, on another, its MCP session (and the session's GET
// stream) and its event stream within seconds (every instance follows the
// key bucket).
func TestRevokedKeyStreamsEndOnEveryInstance(t *testing.T) {
	t.Parallel()
	e := start(t)
	startTestServer(t, e, "slow")
	e2 := runGateway(t, e.st, "test-gateway-2", e.dir, e.logs, gateway.Options{})
	r := e.do("POST", "/api/v1/keys", model.KeyCreateRequest{Name: "ops", Scopes: []string{model.KeyScopeAdmin, model.KeyScopeCall}})
	var k model.KeyCreateReply
	r.decode(t, &k)
	if r.status != http.StatusCreated || k.Key == "" {
		t.Fatalf("creating the key: %d %s", r.status, r.body)
	}
	s := connectMCPAt(t, e2.url, k.Key, "2025-11-25")
	if got := callText(t, s.ClientSession, "slow__echo", map[string]any{"message": "before"}); got != "before" {
		t.Fatalf("echo before the revocation: %q", got)
	}
	events := openSSE(t, e2.url+"/api/v1/events", k.Key)
	ended := make(chan error, 1)
	go func() { ended <- s.Wait() }()

	if r := e.do("DELETE", "/api/v1/keys/"+k.ID, nil); r.status != http.StatusOK {
		t.Fatalf("revoking through the first instance: %d %s", r.status, r.body)
	}
	deadline := time.After(10 * time.Second)
	for open := true; open; {
		select {
		case _, open = <-events.frames:
		case <-deadline:
			t.Fatal("the event stream on the other instance is still open 10s after the revocation")
		}
	}
	select {
	case <-ended:
	case <-deadline:
		t.Fatal("the MCP session on the other instance is still open 10s after the revocation")
	}
}

// tsV1MovedScript opens a 2025-11-25 session with the TypeScript SDK v1 on
// one instance, sends its next request to another (as a load balancer
// without affinity would) and prints what the SDK made of it, then whether
// a new connection to the other instance works.
const tsV1MovedScript = `
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
const [first, other, key] = process.argv.slice(2);
let target = first;
const fetchTo = (url, init) => fetch(target + new URL(url).pathname + new URL(url).search, init);
const opts = { fetch: fetchTo, requestInit: { headers: { Authorization: "Bearer " + key } } };
const client = new Client({ name: "ts-v1-moved", version: "1" });
await client.connect(new StreamableHTTPClientTransport(new URL(first + "/mcp"), opts));
target = other;
const out = {};
try { await client.listTools(); out.moved = "ok"; } catch (e) { out.moved = e.constructor.name + " " + e.code; }
await client.close().catch(() => {});
const again = new Client({ name: "ts-v1-again", version: "1" });
await again.connect(new StreamableHTTPClientTransport(new URL(other + "/mcp"), opts));
out.again = (await again.listTools()).tools.length > 0 ? "ok" : "no tools";
await again.close();
console.log(JSON.stringify(out));
`

// TestTypeScriptSDKv1SessionMoved: the TypeScript SDK v1 client whose
// session is unknown to the instance it reaches gets StreamableHTTPError
// 404 at once (it does not initialize again by itself, docs/gateway.md); a
// new connection works.
func TestTypeScriptSDKv1SessionMoved(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed: %v", err)
	}
	e := start(t)
	startTestServer(t, e, "slow")
	e2 := runGateway(t, e.st, "test-gateway-2", e.dir, e.logs, gateway.Options{})
	dir := t.TempDir()
	if err := os.Symlink(filepath.Join(clitest.RepoRoot(t), "tests", "npm", "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "moved.mjs")
	if err := os.WriteFile(script, []byte(tsV1MovedScript), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctxT(t, 60*time.Second), node, script, e.url, e2.url, e.admin).CombinedOutput()
	if err != nil {
		t.Fatalf("node moved.mjs: %v\n%s", err, out)
	}
	var got map[string]string
	if err := json.Unmarshal(bytes.TrimSpace(out), &got); err != nil {
		t.Fatalf("the script's output: %v\n%s", err, out)
	}
	if got["moved"] != "StreamableHTTPError 404" || got["again"] != "ok" {
		t.Fatalf("TypeScript SDK v1 after the move: %v", got)
	}
}
