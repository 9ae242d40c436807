package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/procmem"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// The runner's scale: many servers on one runner, the memory each costs the
// runner's process, and that stopping them leaves no child behind.

// maxHeapPerServer is the target: ≤ 1 MB of runner overhead per
// managed server.
const maxHeapPerServer = 1 << 20

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// memSnapshot is the process's memory after a full collection.
type memSnapshot struct {
	heapInuse, stackInuse, rss uint64
	goroutines                 int
}

// snapshot collects garbage (twice, so finalizers' garbage goes too), hands
// freed pages back to the OS so that RSS shows live memory only, and reads
// HeapInuse, StackInuse and VmRSS.
func snapshot(tb testing.TB) memSnapshot {
	tb.Helper()
	runtime.GC()
	debug.FreeOSMemory() // a GC too, then the scavenger returns free pages
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memSnapshot{heapInuse: ms.HeapInuse, stackInuse: ms.StackInuse, rss: vmRSS(tb), goroutines: runtime.NumGoroutine()}
}

// vmRSS is this process's resident set size in bytes (/proc/self/status).
func vmRSS(tb testing.TB) uint64 {
	tb.Helper()
	return procRSS(tb, "self")
}

// procRSS is the resident set size in bytes of process pid ("self" or a
// number), from /proc/<pid>/status.
func procRSS(tb testing.TB, pid string) uint64 { return procStatus(tb, pid, "VmRSS") }

// procStatus is a kB field of /proc/<pid>/status (VmRSS, RssAnon …), in bytes.
func procStatus(tb testing.TB, pid, field string) uint64 {
	tb.Helper()
	v, err := procmem.Status(pid, field)
	if err != nil {
		tb.Fatal(err)
	}
	return uint64(v)
}

// perServer is memory growth per server, in bytes (may be negative).
type perServer struct{ heap, stack, rss float64 }

func growth(before, after memSnapshot, n int) perServer {
	d := func(a, b uint64) float64 { return (float64(b) - float64(a)) / float64(n) }
	return perServer{heap: d(before.heapInuse, after.heapInuse), stack: d(before.stackInuse, after.stackInuse), rss: d(before.rss, after.rss)}
}

// fleet is n eager copies of the Go test server on one runner.
type fleet struct {
	e        *runnertest.Env
	cfgs     []model.McpConfig
	pids     []int
	startAll time.Duration // first put → every server running
}

// startFleet puts n eager configs of the test server and waits until all run.
func startFleet(tb testing.TB, e *runnertest.Env, n int) *fleet {
	tb.Helper()
	f := &fleet{e: e}
	begin := time.Now()
	for i := 0; i < n; i++ {
		cfg := runnertest.Binary(fmt.Sprintf("srv-%02d", i), testServer)
		cfg.Runtime.Eager = true
		f.cfgs = append(f.cfgs, e.Put(tb, cfg))
	}
	// Fifty processes spawn and initialize at once beside the rest of `make
	// test` (-p 4, -race): one still starting after 30 s failed CI twice.
	// This is a memory test; start-up time is measured elsewhere.
	for _, cfg := range f.cfgs {
		st := e.WaitState(tb, cfg.Slug, model.StateRunning, 90*time.Second)
		if st.PID <= 0 {
			tb.Fatalf("server %s runs without a pid: %+v", cfg.Slug, st)
		}
		f.pids = append(f.pids, st.PID)
	}
	f.startAll = time.Since(begin)
	return f
}

// echoAll calls echo on every server from workers goroutines and checks each
// result is the server's own message.
func (f *fleet) echoAll(tb testing.TB, workers int) {
	tb.Helper()
	jobs := make(chan string)
	errs := make(chan error, len(f.cfgs))
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for slug := range jobs {
				want := "hello " + slug
				args, _ := json.Marshal(map[string]string{"message": want})
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				raw, err := f.e.Client.Call(ctx, slug, "echo", args, nil)
				cancel()
				if err != nil {
					errs <- fmt.Errorf("echo on %s: %w", slug, err)
					continue
				}
				if got, err := resultText(raw); err != nil || got != want {
					errs <- fmt.Errorf("echo on %s returned %q (%v), want %q", slug, got, err, want)
				}
			}
		}()
	}
	for _, cfg := range f.cfgs {
		jobs <- cfg.Slug
	}
	close(jobs)
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Error(err)
	}
	if tb.Failed() {
		tb.FailNow()
	}
}

// resultText is the first text content of a CallToolResult.
func resultText(raw json.RawMessage) (string, error) {
	var r struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return "", fmt.Errorf("not a CallToolResult: %w: %s", err, raw)
	}
	if r.IsError || len(r.Content) == 0 {
		return "", fmt.Errorf("tool error or no content: %s", raw)
	}
	return r.Content[0].Text, nil
}

// alive reports whether pid is a live process (a zombie counts as gone).
func alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command's closing parenthesis: "pid (comm) S …".
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// testServerChildren lists live children of this process running the test server.
func testServerChildren(tb testing.TB) []int {
	tb.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		tb.Fatal(err)
	}
	self := strconv.Itoa(os.Getpid())
	var pids []int
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		status, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "status"))
		if err != nil || !strings.Contains(string(status), "\nPPid:\t"+self+"\n") {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if argv0, _, _ := bytes.Cut(cmdline, []byte{0}); string(argv0) == testServer && alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// stopAll deletes every config and checks that every child process ends.
func (f *fleet) stopAll(tb testing.TB) time.Duration {
	tb.Helper()
	begin := time.Now()
	for _, cfg := range f.cfgs {
		f.e.Delete(tb, cfg.ID)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		var left []int
		for _, pid := range f.pids {
			if alive(pid) {
				left = append(left, pid)
			}
		}
		if len(left) == 0 && len(testServerChildren(tb)) == 0 {
			return time.Since(begin)
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d of %d server processes still alive 20s after their configs were deleted: %v (children: %v)",
				len(left), len(f.pids), left, testServerChildren(tb))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// writeHeapProfile writes a heap profile to path (after a GC).
func writeHeapProfile(tb testing.TB, path string) {
	tb.Helper()
	runtime.GC()
	out, err := os.Create(path)
	if err != nil {
		tb.Error(err)
		return
	}
	defer out.Close()
	if err := pprof.Lookup("heap").WriteTo(out, 0); err != nil {
		tb.Error(err)
	}
}

// TestFiftyServers runs 50 test servers on one runner: all start, all answer,
// the runner's process grows by less than 1 MiB of heap per server, and
// deleting the configs ends every child. MCPBUS_BENCH_HEAPPROFILE=/path
// writes a heap profile taken with the 50 servers running.
func TestFiftyServers(t *testing.T) {
	const n = 50
	if os.Getenv("MCPBUS_BENCH_HEAPPROFILE") != "" {
		runtime.MemProfileRate = 4096 // a finer profile than the default 512 KiB sampling
	}
	e := runnertest.Start(t, runner.Options{MaxServers: 60, Logger: discardLogger()})
	before := snapshot(t)

	f := startFleet(t, e, n)
	f.echoAll(t, 8)
	after := snapshot(t)
	g := growth(before, after, n)
	if path := os.Getenv("MCPBUS_BENCH_HEAPPROFILE"); path != "" {
		writeHeapProfile(t, path)
	}
	t.Logf("started %d servers in %s (%.1f ms/server)", n, f.startAll.Round(time.Millisecond), float64(f.startAll.Microseconds())/1000/n)
	t.Logf("runner process growth per server: heap %.0f KiB, goroutine stacks %.0f KiB, RSS %.0f KiB (goroutines %d → %d)",
		g.heap/1024, g.stack/1024, g.rss/1024, before.goroutines, after.goroutines)
	t.Logf("totals: HeapInuse %d → %d KiB, StackInuse %d → %d KiB, VmRSS %d → %d KiB",
		before.heapInuse>>10, after.heapInuse>>10, before.stackInuse>>10, after.stackInuse>>10, before.rss>>10, after.rss>>10)
	if g.heap >= maxHeapPerServer {
		path := filepath.Join(os.TempDir(), "mcpbus-fifty-servers.heap.pprof")
		writeHeapProfile(t, path)
		t.Errorf("heap growth %.0f KiB per server, want < 1024 KiB; heap profile in %s", g.heap/1024, path)
	}

	if kids := testServerChildren(t); len(kids) != n {
		t.Errorf("%d test server children of this process before the stop, want %d", len(kids), n)
	}
	stopIn := f.stopAll(t)
	t.Logf("all %d server processes gone %s after deleting their configs", n, stopIn.Round(time.Millisecond))
}

// BenchmarkRunnerMemoryPerServer reports the growth of the runner's process
// (embedded NATS included, as in mcpbus up) per running test server, for 20
// servers. It measures once, whatever b.N.
func BenchmarkRunnerMemoryPerServer(b *testing.B) {
	const n = 20
	e := runnertest.Start(b, runner.Options{MaxServers: n + 10, Logger: discardLogger()})
	before := snapshot(b)
	f := startFleet(b, e, n)
	f.echoAll(b, 8)
	after := snapshot(b)
	g := growth(before, after, n)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(g.heap/1024, "heap-KiB/server")
	b.ReportMetric(g.stack/1024, "stack-KiB/server")
	b.ReportMetric(g.rss/1024, "rss-KiB/server")
	b.ReportMetric(float64(f.startAll.Microseconds())/1000, "start-all-ms")
	f.stopAll(b)
}
