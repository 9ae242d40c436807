package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/access"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/procmem"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/services/gateway/rest"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/tools/mcpbus/stack"
)

// The gateway's hot paths against the direct stdio baseline of the same run:
// a go-sdk MCP client over Streamable HTTP → gateway (/mcp) → bus → runner →
// the Go test server, and POST /mcp/invoke from many HTTP clients, with an
// API key (auth on) as deployed.

// gwTool is the test server's echo as the gateway names it.
const gwTool = "bench__echo"

// gwEnv is a running gateway with the test server as "bench".
type gwEnv struct {
	st   *stack.Stack // nil when the gateway runs in a process of its own
	pid  int          // the mcpbus up process, when the gateway runs in one
	url  string       // http://<addr>
	key  string       // a call-scoped API key
	nats string       // mcpbus up's NATS URL, when the gateway runs in it
	data string       // mcpbus up's data dir (its operator identity)
	// heapDir, with pprof (up's --pprof-addr): where each row's heap
	// profile of mcpbus up is written, right after its RSS is read.
	heapDir, pprof string
}

// startGateway starts the stack with a gateway (auth on, rate limit out of
// the way) and the test server, and returns once both /mcp and /mcp/invoke
// can call its echo.
func startGateway(b *testing.B) *gwEnv {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := stack.Start(ctx, stack.Options{
		DataDir: b.TempDir(), InProcessOnly: true, Logger: discardLogger(),
		Runner: runner.Options{StopGrace: 100 * time.Millisecond, StopTimeout: 3 * time.Second},
		Gateway: &gateway.Options{Addr: "127.0.0.1:0", RateRPS: 1e9, RateBurst: 1 << 30,
			ShutdownTimeout: 4 * time.Second},
	})
	if err != nil {
		b.Fatalf("starting the stack: %v", err)
	}
	b.Cleanup(st.Close)
	key, err := st.Gateway.Keys().Create(ctx, model.KeyCreateRequest{Name: "bench", Scopes: []string{model.KeyScopeCall}})
	if err != nil {
		b.Fatalf("creating an API key: %v", err)
	}
	cfg := model.McpConfig{
		Name: "bench", Enabled: true,
		Package:   model.Package{Type: model.PackageBinary, Identifier: testServer},
		Transport: model.Transport{Type: model.TransportStdio},
		Runtime:   model.Runtime{Eager: true},
	}
	if _, err := st.Client.CreateConfig(ctx, cfg, nil); err != nil {
		b.Fatalf("creating the bench server: %v", err)
	}
	e := &gwEnv{st: st, url: "http://" + st.Gateway.Addr(), key: key.Key}
	// Both catalogs (the aggregate's and the REST API's) follow KV by watch:
	// call until each has the tool.
	sess := e.mcpSession(b)
	await(b, "/mcp", mcpCaller(sess))
	await(b, "/mcp/invoke", e.invoker(b))
	return e
}

// await calls fn until it succeeds, for at most 30 s.
func await(b *testing.B, what string, fn caller) {
	b.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := fn(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s never answered a call of %s: %v", what, gwTool, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// keyTransport adds the bearer key to every request.
type keyTransport struct {
	key  string
	base http.RoundTripper
}

func (k *keyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+k.key)
	return k.base.RoundTrip(r)
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the pool.
func (k *keyTransport) CloseIdleConnections() {
	if c, ok := k.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// httpClient is one client with its own connection pool. It keeps enough
// idle connections for its concurrent requests (net/http keeps 2 per host by
// default and would open a new connection for every request beyond them).
func (e *gwEnv) httpClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 32
	return &http.Client{Transport: &keyTransport{key: e.key, base: t}}
}

// mcpSession is a go-sdk client session on /mcp over Streamable HTTP, with
// the standalone SSE stream, as go-sdk opens it by default, pinned to
// protocol 2026-07-28 (stateless; go-sdk v1.8.0's own choice), so the row
// measures that era whatever a later client defaults to.
func (e *gwEnv) mcpSession(b *testing.B) *mcp.ClientSession {
	return e.mcpSessionOf(b, &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
}

// mcpLegacySession is mcpSession on protocol 2025-11-25 (initialize, a
// session id), the protocol the go-sdk client speaks with the peer, which
// knows no later one: the client side of the call is then the same work.
func (e *gwEnv) mcpLegacySession(b *testing.B) *mcp.ClientSession {
	return e.mcpSessionOf(b, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
}

func (e *gwEnv) mcpSessionOf(b *testing.B, opts *mcp.ClientSessionOptions) *mcp.ClientSession {
	b.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hc := e.httpClient()
	sess, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: e.url + "/mcp", HTTPClient: hc}, opts)
	if err != nil {
		b.Fatalf("connecting to /mcp: %v", err)
	}
	// Its connections end with it, so later rows (and the quiet row's RSS)
	// do not carry them.
	b.Cleanup(func() { _ = sess.Close(); hc.CloseIdleConnections() })
	return sess
}

// directHTTP starts the test server serving Streamable HTTP itself (its own
// process, no gateway) and connects a go-sdk client to it: the cost of MCP
// over HTTP alone, for reference.
func directHTTP(b *testing.B) caller {
	b.Helper()
	url, _ := testkit.StartURLServer(b, testServer, "-http", "127.0.0.1:0")
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 32
	client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sess, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: t}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sess.Close() })
	return func(ctx context.Context) error {
		res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: echoArgs})
		if err == nil && res.IsError {
			err = fmt.Errorf("tool error: %+v", res.Content)
		}
		return err
	}
}

// serveMCP serves srv over Streamable HTTP on a loopback port (go-sdk's
// defaults: stateful, SSE answers) and returns a go-sdk client session on it.
func serveMCP(b *testing.B, srv *mcp.Server) *mcp.ClientSession {
	return serveMCPWith(b, srv, nil)
}

// serveMCPWith is serveMCP with wrap (if any) in front of go-sdk's handler.
func serveMCPWith(b *testing.B, srv *mcp.Server, wrap func(http.Handler) http.Handler) *mcp.ClientSession {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	if wrap != nil {
		h = wrap(h)
	}
	hs := &http.Server{Handler: h}
	go func() { _ = hs.Serve(ln) }()
	b.Cleanup(func() { _ = hs.Close() })
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 32
	client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sess, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + ln.Addr().String(), HTTPClient: &http.Client{Transport: t}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sess.Close() })
	return sess
}

// proxyTool is the echo tool a minimal proxy exposes, with the input schema
// left open: the server downstream checks the arguments.
var proxyTool = &mcp.Tool{Name: gwTool, InputSchema: json.RawMessage(`{"type":"object"}`)}

// proxyStdio is the simplest Go MCP proxy, for reference: a go-sdk
// Streamable HTTP server in this process whose one tool calls the test
// server through a go-sdk stdio session, no bus, no auth. It is the shape of
// the Go proxy the issue compares mcpbus with.
func proxyStdio(b *testing.B) caller {
	b.Helper()
	up := mcp.NewClient(&mcp.Implementation{Name: "proxy", Version: "1"}, nil)
	upSess, err := up.Connect(context.Background(), &mcp.CommandTransport{Command: exec.Command(testServer)}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = upSess.Close() })
	srv := mcp.NewServer(&mcp.Implementation{Name: "proxy", Version: "1"}, nil)
	srv.AddTool(proxyTool, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return upSess.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: req.Params.Arguments})
	})
	return mcpCaller(serveMCP(b, srv))
}

// proxyBus is proxyStdio with the bus in between: the tool calls the runner
// of e's stack through libs/client on an in-process connection, as the
// gateway does, but without the gateway's auth, middleware, aggregate and
// argument check. Against proxyStdio it prices the bus hop; against mcp, the
// gateway's own code.
func proxyBus(b *testing.B, e *gwEnv) caller {
	b.Helper()
	nc, err := e.st.ConnectAs("bench-proxy", access.Gateway)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	c := client.New(nc, client.Options{})
	srv := mcp.NewServer(&mcp.Implementation{Name: "proxy", Version: "1"}, nil)
	srv.AddTool(proxyTool, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		raw, err := c.Call(ctx, "bench", "echo", req.Params.Arguments, nil)
		if err != nil {
			return nil, err
		}
		var res mcp.CallToolResult
		if err := json.Unmarshal(raw, &res); err != nil {
			return nil, err
		}
		return &res, nil
	})
	return mcpCaller(serveMCP(b, srv))
}

// floorHTTP prices the HTTP leg alone, for reference: the go-sdk client's
// tools/call answered at once by a handler that decodes the request with
// go-sdk's codec and writes a result encoded beforehand (go-sdk's handler
// still serves initialize and the notifications). Any gateway that speaks
// Streamable HTTP to a go-sdk client and forwards the call pays at least
// floor-http on top of the forwarded call, so floor-http + direct (+ the
// NATS floor, for a bus) bounds what such a gateway can reach.
func floorHTTP(b *testing.B) caller {
	b.Helper()
	result, err := json.Marshal(&mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(echoArgs)}}})
	if err != nil {
		b.Fatal(err)
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "floor", Version: "1"}, nil)
	srv.AddTool(proxyTool, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return nil, fmt.Errorf("the floor handler answers calls itself")
	})
	canned := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost || r.Header.Get("Mcp-Session-Id") == "" {
				next.ServeHTTP(w, r)
				return
			}
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			msg, err := jsonrpc.DecodeMessage(body)
			req, ok := msg.(*jsonrpc.Request)
			if err != nil || !ok || req.Method != "tools/call" {
				r.Body = io.NopCloser(bytes.NewReader(body))
				next.ServeHTTP(w, r)
				return
			}
			data, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: req.ID, Result: result})
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(data)
		})
	}
	return mcpCaller(serveMCPWith(b, srv, canned))
}

// mcpCaller calls the gateway's echo on sess.
func mcpCaller(sess *mcp.ClientSession) caller { return toolCaller(sess, gwTool) }

// toolCaller calls tool (the test server's echo under that name) on sess.
func toolCaller(sess *mcp.ClientSession, tool string) caller {
	return func(ctx context.Context) error {
		res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: echoArgs})
		if err == nil && res.IsError {
			err = fmt.Errorf("tool error: %+v", res.Content)
		}
		return err
	}
}

// invoker is one HTTP client of POST /mcp/invoke (its own connection).
func (e *gwEnv) invoker(b *testing.B) caller {
	b.Helper()
	body, err := json.Marshal(rest.InvokeRequest{ToolName: gwTool, Params: echoArgs})
	if err != nil {
		b.Fatal(err)
	}
	hc := e.httpClient()
	url := e.url + "/mcp/invoke"
	b.Cleanup(hc.CloseIdleConnections)
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		var out rest.InvokeReply
		if err := json.Unmarshal(data, &out); err != nil {
			return fmt.Errorf("HTTP %d, body %q: %w", resp.StatusCode, data, err)
		}
		if resp.StatusCode != http.StatusOK || !out.Success {
			return fmt.Errorf("HTTP %d: %s (%s)", resp.StatusCode, out.Error, out.ErrorType)
		}
		return nil
	}
}

// gatewaySuite runs the sub-benchmarks against e, each paired with the
// direct stdio baseline (see paired): /mcp with 1 caller, 8 callers on one
// session and 8 sessions; POST /mcp/invoke with 1, 8 and 64 clients (each
// its own connection); the peer proxy (peer, see startPeer) with 1 and 8
// callers, and the same peer in session mode (peer-session, mcp-go's
// default: a session per client, as users run it). The /mcp and /mcp/invoke
// rows are also paired with both peers and with the floor in the same
// rounds (p50/peer, rate/peer, p50/peer-session, rate/peer-session,
// p50/peer-bus, rate/peer-bus): the floor is the peer with one in-process NATS
// request/reply between its HTTP side and its stdio client, the hops of
// mcpbus with nothing of mcpbus in them; peer-session-bus is the same floor
// on the session peer (peerproxy -session -bus), so the rows say, against
// the session peer in the same rounds, what remains with every part of ours
// taken out, and what the hop (peer-session-bus ÷ peer-session) and the
// session handling (peer ÷ peer-session) cost. The relay side is the floor
// of any proxy (cmd/relayfloor: go-sdk's handlers for the handshake, each
// tools/call relayed as bytes to the test server's stdio, nothing else), its
// client on the row's protocol era; p50-relay/peer-session and
// rate-relay/peer-session say where that floor stands against the session
// peer in the same rounds, so p50/relay is what mcpbus adds over the least a
// proxy can do. In the rows of 8 callers or more, relay-js is the same relay
// keeping a durable record of each call in two JetStream file streams, as
// mcpbus keeps its call events and audit records: the memory floor of that
// design (relay-js-rss-MiB). Each of those reports the CPU per
// call of the serving process (up-, peer-, peer-session-, peer-bus-, peer-session-bus-, relay-cpu-µs/call;
// up only when the gateway runs in mcpbus up). mcp rows are /mcp with the
// go-sdk client pinned to protocol 2026-07-28, mcp-legacy rows pinned to
// 2025-11-25 (a session), the protocol the go-sdk client speaks with the peer. With reference, also the test
// server serving Streamable HTTP itself (direct-http), the HTTP leg alone
// (floor-http) and two minimal go-sdk proxies in this process, straight to
// stdio (proxy-stdio) and through the bus (proxy-bus). The baseline, and the
// peer next to a subject, have as many callers on one session as the
// subject has, 8 for 64 clients. When the gateway runs in mcpbus up, the
// rows are also paired with a plain nats.go request to the same up's runner
// (nats): over-nats-µs is then the gateway's own cost over the NATS path
// (the subject's p50 minus that request's, per round), and with that cost's
// floor, relay-nats (cmd/relayfloor -nats: the relay's HTTP edge sending each
// call as one NATS request to the same runner; an MCP client on the /mcp
// rows, plain HTTP posts on the /mcp/invoke rows): relay-nats-over-nats-µs is
// what an HTTP edge with nothing of mcpbus adds to that path. Every row reports the
// peers' RSS after it (peer-rss-MiB, peer-session-rss-MiB) and, when the
// gateway runs in mcpbus up, up's (up-rss-MiB).
func gatewaySuite(b *testing.B, e *gwEnv, reference bool) {
	peer, floor := startPeer(b), startPeer(b, "-bus")
	peerSession, floorSession := startPeer(b, "-session"), startPeer(b, "-session", "-bus")
	relay, relayJS := startRelay(b), startRelay(b, "-js", b.TempDir())
	var relayNATS *peerEnv
	if e.nats != "" {
		// The floor of the gateway's own cost over the NATS path: the relay
		// sending each call to up's runner as one NATS request, as the nats
		// side does, over its own TCP connection (the operator's identity).
		relayNATS = startRelay(b, "-nats", e.nats, "-nkey", filepath.Join(e.data, "nats", "operator.nk"),
			"-inbox-prefix", "_I.operator", "-call-prefix", strings.TrimSuffix(bus.NewSubjects("").Call("bench", "echo"), "echo"))
	}
	rss := func(b *testing.B) {
		reportRSS(b, "peer-rss-MiB", peer.pid)
		reportRSS(b, "peer-session-rss-MiB", peerSession.pid)
		reportRSS(b, "peer-bus-rss-MiB", floor.pid)
		reportRSS(b, "peer-session-bus-rss-MiB", floorSession.pid)
		reportRSS(b, "relay-rss-MiB", relay.pid)
		reportRSS(b, "relay-js-rss-MiB", relayJS.pid)
		if relayNATS != nil {
			reportRSS(b, "relay-nats-rss-MiB", relayNATS.pid)
		}
		if e.pid != 0 {
			reportRSS(b, "up-rss-MiB", e.pid)
			e.saveHeap(b)
		}
	}
	vs := func(name string, subject func(b *testing.B) []caller) {
		b.Run(name, func(b *testing.B) {
			ws := subject(b)
			paired(b, ws, same(direct(b), min(len(ws), 8)))
			rss(b)
		})
	}
	// vsPeer is vs with the peer as a second baseline, and the relay floor
	// with its client on protocol era.
	vsPeer := func(name, era string, subject func(b *testing.B) []caller) {
		b.Run(name, func(b *testing.B) {
			ws := subject(b)
			n := min(len(ws), 8)
			sides := []side{{name: "direct", callers: same(direct(b), n)},
				{name: "peer", callers: same(peer.caller(b), n), pid: peer.pid},
				{name: "peer-session", callers: same(peerSession.caller(b), n), pid: peerSession.pid},
				{name: "peer-bus", callers: same(floor.caller(b), n), pid: floor.pid},
				{name: "peer-session-bus", callers: same(floorSession.caller(b), n), pid: floorSession.pid},
				{name: "relay", callers: same(relay.callerOf(b, era), n), pid: relay.pid, against: "peer-session"}}
			if n >= 8 {
				// The memory floor of the 8-caller rows: the relay keeping a
				// durable record of each call, as mcpbus does.
				sides = append(sides, side{name: "relay-js", callers: same(relayJS.callerOf(b, era), n), pid: relayJS.pid, against: "peer-session"})
			}
			if e.nats != "" {
				// The NATS path of the same mcpbus up: the gateway's own cost
				// is over-nats-µs (its CPU, up-cpu − nats-cpu).
				sides = append(sides, side{name: "nats", callers: same(e.natsCaller(b), n), pid: e.pid, over: true})
				// Its floor: the relay's HTTP edge in front of the same path
				// (relay-nats-over-nats-µs), an MCP client on /mcp rows, plain
				// HTTP posts on /mcp/invoke rows.
				rc := relayNATS.callerOf(b, era)
				if strings.HasPrefix(name, "invoke/") {
					rc = relayNATS.invokeCaller(b)
				}
				sides = append(sides, side{name: "relay-nats", callers: same(rc, n), pid: relayNATS.pid, against: "nats"})
			}
			pairedVs(b, side{name: "up", callers: ws, pid: e.pid}, sides...)
			rss(b)
		})
	}
	// shared: n callers on one session; own: n clients, each its own.
	shared := func(mk func(*testing.B) caller, n int) func(*testing.B) []caller {
		return func(b *testing.B) []caller { return same(mk(b), n) }
	}
	own := func(mk func(*testing.B) caller, n int) func(*testing.B) []caller {
		return func(b *testing.B) []caller {
			ws := make([]caller, n)
			for i := range ws {
				ws[i] = mk(b)
			}
			return ws
		}
	}
	mcpSession := func(b *testing.B) caller { return mcpCaller(e.mcpSession(b)) }
	mcpLegacy := func(b *testing.B) caller { return mcpCaller(e.mcpLegacySession(b)) }
	references := func(n int) {
		if !reference {
			return
		}
		vs(fmt.Sprintf("direct-http/callers=%d", n), shared(directHTTP, n))
		vs(fmt.Sprintf("floor-http/callers=%d", n), shared(floorHTTP, n))
		vs(fmt.Sprintf("proxy-stdio/callers=%d", n), shared(proxyStdio, n))
		vs(fmt.Sprintf("proxy-bus/callers=%d", n), shared(func(b *testing.B) caller { return proxyBus(b, e) }, n))
	}

	const modern, legacy = "2026-07-28", "2025-11-25"
	vsPeer("mcp/callers=1", modern, shared(mcpSession, 1))
	vsPeer("mcp-legacy/callers=1", legacy, shared(mcpLegacy, 1))
	vsPeer("invoke/clients=1", legacy, own(e.invoker, 1))
	vs("peer/callers=1", shared(peer.caller, 1))
	vs("peer-session/callers=1", shared(peerSession.caller, 1))
	references(1)
	vsPeer("mcp/callers=8", modern, shared(mcpSession, 8))
	vsPeer("mcp/sessions=8", modern, own(mcpSession, 8))
	vsPeer("mcp-legacy/sessions=8", legacy, own(mcpLegacy, 8))
	vs("peer/callers=8", shared(peer.caller, 8))
	vs("peer-session/callers=8", shared(peerSession.caller, 8))
	references(8)
	vsPeer("invoke/clients=8", legacy, own(e.invoker, 8))
	vsPeer("invoke/clients=64", legacy, own(e.invoker, 64))
	// quiet: the RSS once every process has been idle past up's
	// --idle-release (the other rows read it right after their last call).
	// MCPBUS_BENCH_QUIET waits longer (to take up's heap profile then).
	wait := procmem.DefaultIdleRelease + 3*time.Second
	if d, err := time.ParseDuration(os.Getenv("MCPBUS_BENCH_QUIET")); err == nil && d > wait {
		wait = d
	}
	quiet := e.pid == 0 // nothing to wait for in this process
	b.Run("quiet", func(b *testing.B) {
		if !quiet {
			time.Sleep(wait)
			quiet = true
		}
		rss(b)
	})
}

// BenchmarkGateway measures the gateway inside this process (stack.Start, as
// `mcpbus up` assembles it) against the direct stdio baseline of the same
// run; see gatewaySuite:
//
//	go test -run '^$' -bench 'Gateway$' -benchtime 3000x -count 3 ./bench/
func BenchmarkGateway(b *testing.B) {
	gatewaySuite(b, startGateway(b), true)
}

// BenchmarkGatewayUp is BenchmarkGateway with `mcpbus up` as a process of its
// own, as deployed: the agent (this process) and the gateway no longer share
// a Go runtime (scheduler, garbage collector). Like the peer proxy, it stays
// up for every row, and both report their RSS after each.
func BenchmarkGatewayUp(b *testing.B) {
	gatewaySuite(b, startUp(b), false)
}

// startUp runs `mcpbus up` with its gateway on a free loopback port (auth on,
// a call-scoped key; rate limit out of the way) and the test server, and
// returns once /mcp and /mcp/invoke answer.
func startUp(b *testing.B) *gwEnv {
	b.Helper()
	dir := b.TempDir()
	// MCPBUS_BENCH_UP_BIN runs that mcpbus binary instead of this tree's (an
	// earlier build, to compare).
	bin := os.Getenv("MCPBUS_BENCH_UP_BIN")
	if bin == "" {
		bin = buildMcpbus(b, dir)
	}
	cfg := filepath.Join(dir, "servers.json")
	body := fmt.Sprintf(`{"servers":[{"name":"bench","enabled":true,"package":{"type":"binary","identifier":%q},"transport":{"type":"stdio"},"runtime":{"eager":true}}]}`, testServer)
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		b.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	ports := testkit.NewPorts(b)
	addr := fmt.Sprintf("127.0.0.1:%d", ports.Next())
	natsPort := ports.Next()
	cmd := exec.Command(bin, "up", "--nats-port", fmt.Sprint(natsPort), "--data-dir", data, "--config", cfg,
		"--log-level", "warn", "--http-addr", addr, "--rate-rps", "1e9", "--rate-burst", "1000000000")
	// MCPBUS_BENCH_UP_ARGS adds flags to it (--pprof-addr 127.0.0.1:6061 …).
	cmd.Args = append(cmd.Args, strings.Fields(os.Getenv("MCPBUS_BENCH_UP_ARGS"))...)
	// MCPBUS_BENCH_UP_HEAP=<dir>: a heap profile of it after every row, in dir.
	// MCPBUS_BENCH_UP_CPU=<dir>: its CPU profiles over the whole run, in dir.
	heapDir, cpuDir, pprofAddr := os.Getenv("MCPBUS_BENCH_UP_HEAP"), os.Getenv("MCPBUS_BENCH_UP_CPU"), ""
	if heapDir != "" || cpuDir != "" {
		pprofAddr = fmt.Sprintf("127.0.0.1:%d", ports.Next())
		cmd.Args = append(cmd.Args, "--pprof-addr", pprofAddr)
	}
	// MCPBUS_BENCH_UP_ENV adds variables to the up process (GOMAXPROCS=1 GOGC=100 …).
	cmd.Env = append(os.Environ(), strings.Fields(os.Getenv("MCPBUS_BENCH_UP_ENV"))...)
	// A benchmark stopped by a signal must not leave it running.
	testkit.DieWithTest(cmd)
	// MCPBUS_BENCH_UP_LOG keeps its log (warnings and errors) in that file.
	if path := os.Getenv("MCPBUS_BENCH_UP_LOG"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = f.Close() })
		cmd.Stderr = f
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	})
	// A call-scoped key, made over the bus as `mcpbus keys create` does; the
	// keys service answers once the gateway is up.
	var key model.KeyCreateReply
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := func() error {
			nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", natsPort), operatorOf(data)...)
			if err != nil {
				return err
			}
			defer nc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return bus.RequestJSON(ctx, nc, bus.NewSubjects("").Service("keys", "create"),
				model.KeyCreateRequest{Name: "bench", Scopes: []string{model.KeyScopeCall}}, &key, 5*time.Second)
		}()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("creating an API key on mcpbus up: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	e := &gwEnv{pid: cmd.Process.Pid, url: "http://" + addr, key: key.Key,
		nats: fmt.Sprintf("nats://127.0.0.1:%d", natsPort), data: data, heapDir: heapDir, pprof: pprofAddr}
	await(b, "/mcp/invoke", e.invoker(b))
	if cpuDir != "" {
		e.profileCPU(b, cpuDir)
	}
	sess := e.mcpSession(b)
	await(b, "/mcp", mcpCaller(sess))
	return e
}
