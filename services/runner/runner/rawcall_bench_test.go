package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// BenchmarkCall compares the raw tools/call path with go-sdk's for one call
// at a time on one in-process runner: a NATS client calls the test server's
// echo (or large, for a 64 KiB result) through the embedded NATS server.
// Paired on the same runner and child: each iteration runs a block of calls
// on one path, then a block on the other, so load on the machine hits both
// alike (use -benchtime Nx for N pairs). Per call and path it reports wall
// µs, cpu-µs (this process: caller, NATS server and runner; only the runner
// differs between the two), child-cpu-µs (the MCP server, in 10 ms ticks)
// and allocations in this process.
func BenchmarkCall(b *testing.B) {
	e := runnertest.Start(b, quickOpts())
	e.Put(b, runnertest.Binary("alpha", testServer))
	st := e.WaitState(b, "alpha", model.StateRunning, 10*time.Second)
	benchPaths(b, e, "alpha", st.PID)
}

// BenchmarkCallHTTP is BenchmarkCall with the test server on Streamable
// HTTP (its own process, go-sdk's handler: SSE answers, application/json,
// or stateless, where clients speak protocol 2026-07-28).
func BenchmarkCallHTTP(b *testing.B) {
	for _, mode := range []struct{ name, flag string }{{"sse", ""}, {"json", "-json"}, {"stateless", "-stateless"}} {
		b.Run(mode.name, func(b *testing.B) {
			url, pid := startHTTPTestServer(b, mode.flag)
			e := runnertest.Start(b, quickOpts())
			e.Put(b, httpConfig("web", url, nil))
			e.WaitState(b, "web", model.StateRunning, 10*time.Second)
			benchPaths(b, e, "web", pid)
		})
	}
}

// benchPaths runs BenchmarkCall's paired blocks on server slug, whose
// process is pid.
func benchPaths(b *testing.B, e *runnertest.Env, slug string, pid int) {
	for _, c := range []struct{ name, tool, args string }{
		{"echo", "echo", `{"message":"hello"}`},
		{"64KiB", "large", `{"bytes":65536}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			defer runner.SetRawCalls(true)
			ctx := context.Background()
			args := json.RawMessage(c.args)
			const block = 200
			var sum [2]blockCost // raw, gosdk
			for b.Loop() {
				for i, raw := range []bool{true, false} {
					runner.SetRawCalls(raw)
					if _, err := e.Client.Call(ctx, slug, c.tool, args, nil); err != nil { // settle on the path
						b.Fatal(err)
					}
					start := takeCost(pid)
					for range block {
						if _, err := e.Client.Call(ctx, slug, c.tool, args, nil); err != nil {
							b.Fatal(err)
						}
					}
					sum[i].add(takeCost(pid).since(start))
				}
			}
			for i, path := range []string{"raw", "gosdk"} {
				n := float64(b.N * block)
				b.ReportMetric(float64(sum[i].wall.Microseconds())/n, path+"-µs/call")
				b.ReportMetric(float64(sum[i].cpu.Microseconds())/n, path+"-cpu-µs/call")
				b.ReportMetric(float64(sum[i].child.Microseconds())/n, path+"-child-cpu-µs/call")
				b.ReportMetric(float64(sum[i].allocs)/n, path+"-allocs/call")
				b.ReportMetric(float64(sum[i].bytes)/n, path+"-B/call")
			}
		})
	}
}

// blockCost is what a block of calls cost (or, from takeCost, the totals at a moment).
type blockCost struct {
	wall, cpu, child time.Duration
	allocs, bytes    uint64
}

func takeCost(pid int) blockCost {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return blockCost{wall: time.Duration(time.Now().UnixNano()), cpu: selfCPU(), child: procCPU(pid), allocs: ms.Mallocs, bytes: ms.TotalAlloc}
}

func (c blockCost) since(start blockCost) blockCost {
	return blockCost{c.wall - start.wall, c.cpu - start.cpu, c.child - start.child, c.allocs - start.allocs, c.bytes - start.bytes}
}

func (c *blockCost) add(d blockCost) {
	c.wall += d.wall
	c.cpu += d.cpu
	c.child += d.child
	c.allocs += d.allocs
	c.bytes += d.bytes
}

// selfCPU is the user and system CPU time of this process.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is the user and system CPU time of a running process (from
// /proc/<pid>/stat, in clock ticks of 10 ms).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
