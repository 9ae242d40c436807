package bench

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// Cold start: a call to an idle (lazy) server until its first result, through
// the bus, against a baseline in the same run: exec the same server, go-sdk
// handshake, tools/list and one tools/call, in this process.

var coldArgs = json.RawMessage(`{"message":"cold"}`)

// coldTarget is one MCP server to cold-start.
type coldTarget struct {
	name string
	argv []string // command and arguments
	want string   // echo's text for coldArgs
}

func goTarget() coldTarget {
	return coldTarget{name: "go", argv: []string{testServer}, want: "cold"}
}

// everythingTarget is the published @modelcontextprotocol/server-everything
// installed under tests/npm (`make npm-deps`). It fails the benchmark when missing.
func everythingTarget(b *testing.B) coldTarget {
	b.Helper()
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		b.Fatal("runtime.Caller: cannot locate the benchmark source")
	}
	root := filepath.Clean(filepath.Join(filepath.Dir(self), "..", ".."))
	bin := filepath.Join(root, "tests", "npm", "node_modules", ".bin", "mcp-server-everything")
	if _, err := os.Stat(bin); err != nil {
		b.Fatalf("server-everything is not installed (%s: %v): run `make npm-deps` in %s", bin, err, root)
	}
	return coldTarget{name: "everything", argv: []string{bin}, want: "Echo: cold"}
}

// report sorts the latencies and reports their p50 and p90 in milliseconds.
func report(b *testing.B, lat []time.Duration, prefix string) {
	b.Helper()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(lat[len(lat)/2]), prefix+"-p50-ms")
	b.ReportMetric(ms(lat[len(lat)*9/10]), prefix+"-p90-ms")
}

// coldViaBus makes b.N calls, each to the idle server, and times each call
// until its result. The server goes idle 50 ms after a call (ticks of 10 ms);
// waiting for that is outside the timer.
func coldViaBus(b *testing.B, tgt coldTarget) {
	e := runnertest.Start(b, runner.Options{
		Logger: discardLogger(), TickInterval: 10 * time.Millisecond, StopGrace: 100 * time.Millisecond,
		StartTimeout: 30 * time.Second, HealthInterval: time.Hour,
	})
	cfg := runnertest.Binary("cold", tgt.argv[0], tgt.argv[1:]...)
	cfg.Runtime.IdleTimeout = model.Duration(50 * time.Millisecond)
	e.Put(b, cfg)
	e.WaitState(b, "cold", model.StateRunning, 30*time.Second) // a new lazy server starts once to learn its tools
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	b.StopTimer()
	for i := 0; i < b.N; i++ {
		idle := e.WaitState(b, "cold", model.StateIdle, 10*time.Second)
		if idle.PID != 0 {
			b.Fatalf("idle server has pid %d", idle.PID)
		}
		b.StartTimer()
		t0 := time.Now()
		raw, err := e.Client.Call(ctx, "cold", "echo", coldArgs, nil)
		d := time.Since(t0)
		b.StopTimer()
		if err != nil {
			b.Fatalf("cold call %d: %v", i, err)
		}
		if got, err := resultText(raw); err != nil || got != tgt.want {
			b.Fatalf("cold call %d returned %q (%v), want %q", i, got, err, tgt.want)
		}
		// The status the call left (running, or idle again) must show a start
		// after the call was made: the call did start the server.
		if st := e.Status("cold"); !st.StartedAt.After(t0) {
			b.Fatalf("call %d found the server already started (started %s, call at %s, state %s)", i, st.StartedAt, t0, st.State)
		}
		lat = append(lat, d)
	}
	report(b, lat, "coldstart")
}

// coldDirect is the baseline: exec the server, go-sdk Connect (initialize
// handshake), tools/list (every page, as the runner does) and one tools/call,
// b.N times. Closing the session is outside the timer.
func coldDirect(b *testing.B, tgt coldTarget) {
	ctx := context.Background()
	once := func() (time.Duration, *mcp.ClientSession) {
		t0 := time.Now()
		// The runner's client capabilities (none): with go-sdk's default
		// (roots), server-everything asks for roots/list during the handshake.
		client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}})
		// SIGTERM 100 ms after stdin closes, as the runner's StopGrace here:
		// server-everything does not exit on EOF.
		tr := &mcp.CommandTransport{Command: exec.Command(tgt.argv[0], tgt.argv[1:]...), TerminateDuration: 100 * time.Millisecond}
		sess, err := client.Connect(ctx, tr, nil)
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for _, err := range sess.Tools(ctx, nil) {
			if err != nil {
				b.Fatal(err)
			}
			n++
		}
		res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: coldArgs})
		d := time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
		raw, _ := json.Marshal(res)
		if got, err := resultText(raw); err != nil || got != tgt.want || n == 0 {
			b.Fatalf("direct call returned %q (%v) with %d tools, want %q", got, err, n, tgt.want)
		}
		return d, sess
	}
	_, sess := once() // as the bus side's first start: the binary's pages are in cache
	_ = sess.Close()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	b.StopTimer()
	for i := 0; i < b.N; i++ {
		b.StartTimer()
		d, sess := once()
		b.StopTimer()
		_ = sess.Close() // waits for the server to exit
		lat = append(lat, d)
	}
	report(b, lat, "direct")
}

// BenchmarkColdStart measures a call to an idle server until its first result
// through the bus (bus: coldstart-p50-ms) and the direct baseline of the same
// server in the same run (direct: direct-p50-ms), for the Go test server and
// the published npm server-everything. Run with -benchtime 20x or so: each
// bus iteration also waits ~60 ms for the server to go idle again.
func BenchmarkColdStart(b *testing.B) {
	b.Run("go/bus", func(b *testing.B) { coldViaBus(b, goTarget()) })
	b.Run("go/direct", func(b *testing.B) { coldDirect(b, goTarget()) })
	b.Run("everything/bus", func(b *testing.B) { coldViaBus(b, everythingTarget(b)) })
	b.Run("everything/direct", func(b *testing.B) { coldDirect(b, everythingTarget(b)) })
}
