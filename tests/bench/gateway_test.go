package bench

import (
	"bufio"
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
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
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

// gwCallTimeout bounds one call, so a stall fails the benchmark instead of
// hanging it.
const gwCallTimeout = 30 * time.Second

// gwEnv is a running gateway with the test server as "bench".
type gwEnv struct {
	st  *stack.Stack // nil when the gateway runs in a process of its own
	url string       // http://<addr>
	key string       // a call-scoped API key
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

// httpClient is one client with its own connection pool. It keeps enough
// idle connections for its concurrent requests (net/http keeps 2 per host by
// default and would open a new connection for every request beyond them).
func (e *gwEnv) httpClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 32
	return &http.Client{Transport: &keyTransport{key: e.key, base: t}}
}

// mcpSession is a go-sdk client session on /mcp over Streamable HTTP, with
// the standalone SSE stream, as go-sdk opens it by default.
func (e *gwEnv) mcpSession(b *testing.B) *mcp.ClientSession {
	b.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sess, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: e.url + "/mcp", HTTPClient: e.httpClient()}, nil)
	if err != nil {
		b.Fatalf("connecting to /mcp: %v", err)
	}
	b.Cleanup(func() { _ = sess.Close() })
	return sess
}

// directHTTP starts the test server serving Streamable HTTP itself (its own
// process, no gateway) and connects a go-sdk client to it: the cost of MCP
// over HTTP alone, for reference.
func directHTTP(b *testing.B) caller {
	b.Helper()
	cmd := exec.Command(testServer, "-http", "127.0.0.1:0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatalf("the test server printed no URL: %v", err)
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 32
	client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sess, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: strings.TrimSpace(line), HTTPClient: &http.Client{Transport: t}}, nil)
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
	nc, err := e.st.NATS.Connect()
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
func mcpCaller(sess *mcp.ClientSession) caller {
	return func(ctx context.Context) error {
		res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: gwTool, Arguments: echoArgs})
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

// gwStats are one sub-benchmark's figures.
type gwStats struct {
	p50, p99 time.Duration
	rate     float64 // calls/s
	errors   int64
}

// measure makes b.N calls from len(workers) goroutines, worker i calling
// through workers[i] (the same caller in several slots shares its session),
// and reports p50/p99 of the successful calls, calls/s and errors. Every call
// has a timeout; failed calls are counted, not retried, and fail the
// benchmark at the end.
func measure(b *testing.B, workers []caller) gwStats {
	b.Helper()
	// Warm up: ~200 calls, round robin, at least 5 through every worker.
	for j := 0; j < max(200, 5*len(workers)); j++ {
		ctx, cancel := context.WithTimeout(context.Background(), gwCallTimeout)
		err := workers[j%len(workers)](ctx)
		cancel()
		if err != nil {
			b.Fatalf("warm-up call: %v", err)
		}
	}
	lat := make([]time.Duration, b.N)
	ok := make([]bool, b.N)
	var next, errs atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	cpu0 := treeCPU(b)
	b.ResetTimer()
	start := time.Now()
	for _, call := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), gwCallTimeout)
				t0 := time.Now()
				err := call(ctx)
				d := time.Since(t0)
				cancel()
				if err != nil {
					errs.Add(1)
					if first.CompareAndSwap(nil, err) {
						dumpStacks()
					}
					continue
				}
				lat[i], ok[i] = d, true
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	cpu := treeCPU(b) - cpu0
	var good []time.Duration
	for i, d := range lat {
		if ok[i] {
			good = append(good, d)
		}
	}
	s := gwStats{errors: errs.Load(), rate: float64(len(good)) / elapsed.Seconds()}
	if len(good) > 0 {
		sort.Slice(good, func(i, j int) bool { return good[i] < good[j] })
		s.p50, s.p99 = good[len(good)/2], good[len(good)*99/100]
	}
	b.ReportMetric(float64(s.p50.Microseconds()), "p50-µs")
	b.ReportMetric(float64(s.p99.Microseconds()), "p99-µs")
	b.ReportMetric(s.rate, "calls/s")
	b.ReportMetric(float64(s.errors), "errors")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/call")
	if s.errors > 0 {
		b.Errorf("%d of %d calls failed; first: %v", s.errors, b.N, first.Load())
	}
	return s
}

// dumpStacks writes every goroutine's stack to $MCPBUS_BENCH_STACKS, when
// set, for the post-mortem of a failed call (in process, the gateway's and
// the runner's goroutines are there too).
func dumpStacks() {
	path := os.Getenv("MCPBUS_BENCH_STACKS")
	if path == "" {
		return
	}
	if f, err := os.Create(path); err == nil {
		_ = pprof.Lookup("goroutine").WriteTo(f, 2)
		f.Close()
	}
}

// treeCPU is the CPU time (user + system) used so far by this process and
// every process below it that is still running: the MCP servers, mcpbus up.
// On a machine of 2 vCPUs, CPU per call is what bounds throughput.
func treeCPU(b *testing.B) time.Duration {
	b.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	type proc struct {
		ppid  int
		ticks int64
	}
	procs := map[int]proc{}
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + ent.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// Fields after the command name, which may hold spaces: state ppid … utime(14) stime(15).
		f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
		if len(f) < 13 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		procs[pid] = proc{ppid: ppid, ticks: utime + stime}
	}
	var ticks int64
	tree := map[int]bool{os.Getpid(): true}
	for grew := true; grew; { // the tree is small: repeat until no process joins
		grew = false
		for pid, p := range procs {
			if !tree[pid] && tree[p.ppid] {
				tree[pid], grew = true, true
			}
		}
	}
	for pid := range tree {
		ticks += procs[pid].ticks
	}
	return time.Duration(ticks) * time.Second / clockTicks
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times (100 on Linux).
const clockTicks = 100

// same is n slots of one caller (n callers on one session).
func same(c caller, n int) []caller {
	out := make([]caller, n)
	for i := range out {
		out[i] = c
	}
	return out
}

// ratios reports s against the direct baseline: p50 against p50Base (the
// direct call with as many callers on one session, when that is comparable)
// and calls/s against rateBase.
func ratios(b *testing.B, s gwStats, p50Base *gwStats, rateBase *gwStats) {
	if p50Base != nil && p50Base.p50 > 0 {
		b.ReportMetric(float64(s.p50)/float64(p50Base.p50), "p50/direct")
	}
	if rateBase != nil && rateBase.rate > 0 {
		b.ReportMetric(s.rate/rateBase.rate, "rate/direct")
	}
}

// gatewaySuite runs the sub-benchmarks against e, interleaved with their
// direct baselines: direct stdio with 1 and 8 callers on one session; /mcp
// with 1 caller, 8 callers on one session and 8 sessions; POST /mcp/invoke
// with 1, 8 and 64 clients (each its own connection). With reference, also
// the test server serving Streamable HTTP itself (direct-http) and two
// minimal go-sdk proxies in this process, straight to stdio (proxy-stdio) and
// through the bus (proxy-bus). Ratios are against direct with the same
// number of callers (8 for every concurrent case).
func gatewaySuite(b *testing.B, e *gwEnv, reference bool) {
	var d1, d8 *gwStats // the direct baselines of this run
	keep := func(dst **gwStats, s gwStats) { *dst = &s }
	invoke := func(clients int) {
		b.Run(fmt.Sprintf("invoke/clients=%d", clients), func(b *testing.B) {
			ws := make([]caller, clients)
			for i := range ws {
				ws[i] = e.invoker(b)
			}
			base := d8
			if clients == 1 {
				base = d1
			}
			ratios(b, measure(b, ws), base, base)
		})
	}

	b.Run("direct/callers=1", func(b *testing.B) { keep(&d1, measure(b, same(direct(b), 1))) })
	b.Run("mcp/callers=1", func(b *testing.B) { ratios(b, measure(b, same(mcpCaller(e.mcpSession(b)), 1)), d1, d1) })
	invoke(1)
	if reference {
		b.Run("direct-http/callers=1", func(b *testing.B) { ratios(b, measure(b, same(directHTTP(b), 1)), d1, d1) })
		b.Run("floor-http/callers=1", func(b *testing.B) { ratios(b, measure(b, same(floorHTTP(b), 1)), d1, d1) })
		b.Run("proxy-stdio/callers=1", func(b *testing.B) { ratios(b, measure(b, same(proxyStdio(b), 1)), d1, d1) })
		b.Run("proxy-bus/callers=1", func(b *testing.B) { ratios(b, measure(b, same(proxyBus(b, e), 1)), d1, d1) })
	}
	b.Run("direct/callers=8", func(b *testing.B) { keep(&d8, measure(b, same(direct(b), 8))) })
	b.Run("mcp/callers=8", func(b *testing.B) { ratios(b, measure(b, same(mcpCaller(e.mcpSession(b)), 8)), d8, d8) })
	b.Run("mcp/sessions=8", func(b *testing.B) {
		ws := make([]caller, 8)
		for i := range ws {
			ws[i] = mcpCaller(e.mcpSession(b))
		}
		ratios(b, measure(b, ws), d8, d8)
	})
	if reference {
		b.Run("direct-http/callers=8", func(b *testing.B) { ratios(b, measure(b, same(directHTTP(b), 8)), d8, d8) })
		b.Run("floor-http/callers=8", func(b *testing.B) { ratios(b, measure(b, same(floorHTTP(b), 8)), d8, d8) })
		b.Run("proxy-stdio/callers=8", func(b *testing.B) { ratios(b, measure(b, same(proxyStdio(b), 8)), d8, d8) })
		b.Run("proxy-bus/callers=8", func(b *testing.B) { ratios(b, measure(b, same(proxyBus(b, e), 8)), d8, d8) })
	}
	invoke(8)
	invoke(64)
}

// BenchmarkGateway measures the gateway inside this process (stack.Start, as
// `mcpbus up` assembles it) against the direct stdio baseline of the same
// run; see gatewaySuite. Run the whole benchmark, so each baseline precedes
// its ratios:
//
//	go test -run '^$' -bench Gateway -benchtime 3000x -count 3 ./bench/
func BenchmarkGateway(b *testing.B) {
	gatewaySuite(b, startGateway(b), true)
}

// BenchmarkGatewayUp is BenchmarkGateway with `mcpbus up` as a process of its
// own, as deployed: the agent (this process) and the gateway no longer share
// a Go runtime (scheduler, garbage collector).
func BenchmarkGatewayUp(b *testing.B) {
	gatewaySuite(b, startUp(b), false)
}

// startUp runs `mcpbus up` with its gateway on a free loopback port (auth on,
// a call-scoped key; rate limit out of the way) and the test server, and
// returns once /mcp and /mcp/invoke answer.
func startUp(b *testing.B) *gwEnv {
	b.Helper()
	dir := b.TempDir()
	bin := buildMcpbus(b, dir)
	cfg := filepath.Join(dir, "servers.json")
	body := fmt.Sprintf(`{"servers":[{"name":"bench","enabled":true,"package":{"type":"binary","identifier":%q},"transport":{"type":"stdio"},"runtime":{"eager":true}}]}`, testServer)
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		b.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(b))
	natsPort := freePort(b)
	cmd := exec.Command(bin, "up", "--nats-port", fmt.Sprint(natsPort), "--data-dir", data, "--config", cfg,
		"--log-level", "warn", "--http-addr", addr, "--rate-rps", "1e9", "--rate-burst", "1000000000")
	// MCPBUS_BENCH_UP_ENV adds variables to the up process (GOMAXPROCS=1 GOGC=400 …).
	cmd.Env = append(os.Environ(), strings.Fields(os.Getenv("MCPBUS_BENCH_UP_ENV"))...)
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
			nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", natsPort))
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
	e := &gwEnv{url: "http://" + addr, key: key.Key}
	await(b, "/mcp/invoke", e.invoker(b))
	sess := e.mcpSession(b)
	await(b, "/mcp", mcpCaller(sess))
	return e
}
