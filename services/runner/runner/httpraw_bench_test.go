package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/runner/internal/launch"
)

// BenchmarkHTTPSessionCall measures what a raw tools/call saves on a
// Streamable HTTP upstream (issue 16), below the runner: one go-sdk client
// session on the test server (its own process, -http) over launch's HTTP
// transport, and per call either go-sdk's CallTool plus the json.Marshal
// the runner does for its reply ("gosdk"), or launch.HTTPConn.CallTool on
// the same session plus launch.CheckToolResult ("raw", as the runner's raw
// path does). It first measured a prototype of the raw call (docs/benchmarks.md). Paired as
// BenchmarkCall is: each iteration runs a block of calls on one path, then
// on the other; -benchtime Nx for N pairs. par=8 runs each block from 8
// goroutines. Per call and path: wall µs, cpu-µs of this process (the
// client side only), the server's cpu-µs, allocations.
func BenchmarkHTTPSessionCall(b *testing.B) {
	for _, mode := range []struct{ name, flag string }{{"sse", ""}, {"json", "-json"}} {
		b.Run(mode.name, func(b *testing.B) {
			url, pid := startHTTPTestServer(b, mode.flag)
			cfg := &model.McpConfig{Name: "web", Slug: "web", Transport: model.Transport{Type: model.TransportHTTP, URL: url}}
			l, err := launch.Prepare(context.Background(), cfg, nil, launch.Options{})
			if err != nil {
				b.Fatal(err)
			}
			client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			sess, err := client.Connect(ctx, l.Transport, nil)
			cancel()
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = sess.Close() })
			conn := l.Connected(sess)
			for _, c := range []struct{ name, tool, args string }{
				{"echo", "echo", `{"message":"hello"}`},
				{"64KiB", "large", `{"bytes":65536}`},
			} {
				args := json.RawMessage(c.args)
				paths := [2]func(context.Context) error{
					func(ctx context.Context) error {
						res, _, err := conn.CallTool(ctx, c.tool, args, nil)
						if err == nil {
							_, _, err = launch.CheckToolResult(res) // as the runner's raw path does
						}
						return err
					},
					func(ctx context.Context) error {
						res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: c.tool, Arguments: args})
						if err != nil {
							return err
						}
						if res.IsError {
							return fmt.Errorf("tool error: %+v", res.Content)
						}
						_, err = json.Marshal(res)
						return err
					},
				}
				for _, par := range []int{1, 8} {
					b.Run(fmt.Sprintf("%s/par=%d", c.name, par), func(b *testing.B) {
						pairedBlocks(b, pid, par, paths)
					})
				}
			}
		})
	}
}

// pairedBlocks runs blocks of calls on paths[0] (raw) and paths[1] (gosdk)
// in turn, from par goroutines, and reports each path's cost per call.
func pairedBlocks(b *testing.B, pid, par int, paths [2]func(context.Context) error) {
	const block = 200
	ctx := context.Background()
	var sum [2]blockCost
	for b.Loop() {
		for i, call := range paths {
			if err := call(ctx); err != nil { // settle on the path
				b.Fatalf("path %d: %v", i, err)
			}
			start := takeCost(pid)
			var next atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, par)
			for range par {
				wg.Go(func() {
					for next.Add(1) <= block {
						if err := call(ctx); err != nil {
							errs <- err
							return
						}
					}
				})
			}
			wg.Wait()
			sum[i].add(takeCost(pid).since(start))
			select {
			case err := <-errs:
				b.Fatal(err)
			default:
			}
		}
	}
	for i, path := range []string{"raw", "gosdk"} {
		n := float64(b.N * block)
		b.ReportMetric(float64(sum[i].wall.Nanoseconds())/n, path+"-ns/call")
		b.ReportMetric(float64(sum[i].cpu.Microseconds())/n, path+"-cpu-µs/call")
		b.ReportMetric(float64(sum[i].child.Microseconds())/n, path+"-server-cpu-µs/call")
		b.ReportMetric(float64(sum[i].allocs)/n, path+"-allocs/call")
		b.ReportMetric(float64(sum[i].bytes)/n, path+"-B/call")
	}
}

// startHTTPTestServer runs the test server on Streamable HTTP (extra: a flag
// such as -json) and returns its URL and pid.
func startHTTPTestServer(b *testing.B, extra string) (string, int) {
	b.Helper()
	args := []string{"-http", "127.0.0.1:0"}
	if extra != "" {
		args = append(args, extra)
	}
	return testkit.StartURLServer(b, testServer, args...)
}
