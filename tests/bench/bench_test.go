// Package bench measures mcpbus's hot paths against baselines taken in the
// same run: a tool call through the bus vs a direct go-sdk stdio call to the
// same Go test server. See docs/benchmarks.md.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

var testServer string

func TestMain(m *testing.M) {
	path, cleanup, err := runnertest.BuildTestServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testServer = path
	code := m.Run()
	cleanup()
	os.Exit(code)
}

var echoArgs = json.RawMessage(`{"message":"benchmark payload of a typical small tool call"}`)

// caller performs one tool call.
type caller func(ctx context.Context) error

// direct connects a go-sdk client to a fresh test server over stdio.
func direct(b *testing.B) caller {
	b.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	sess, err := client.Connect(context.Background(), &mcp.CommandTransport{Command: exec.Command(testServer)}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sess.Close() })
	return func(ctx context.Context) error {
		res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: echoArgs})
		if err == nil && res.IsError {
			err = fmt.Errorf("tool error")
		}
		return err
	}
}

// viaBus runs an embedded NATS and a runner owning the test server, and calls
// through libs/client on its own connection.
func viaBus(b *testing.B) caller {
	b.Helper()
	e := runnertest.Start(b, runner.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	e.Put(b, runnertest.Binary("bench", testServer))
	e.WaitState(b, "bench", model.StateRunning, 10*time.Second)
	return func(ctx context.Context) error {
		_, err := e.Client.Call(ctx, "bench", "echo", echoArgs, nil)
		return err
	}
}

// viaBusInProcess is viaBus with the caller connected in process, as the
// gateway and chat services are inside mcpbus up.
func viaBusInProcess(b *testing.B) caller {
	b.Helper()
	e := runnertest.Start(b, runner.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	e.Put(b, runnertest.Binary("bench", testServer))
	e.WaitState(b, "bench", model.StateRunning, 10*time.Second)
	nc, err := e.NS.Connect()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	c := client.New(nc, client.Options{})
	return func(ctx context.Context) error {
		_, err := c.Call(ctx, "bench", "echo", echoArgs, nil)
		return err
	}
}

// run makes b.N calls from callers goroutines and reports p50/p99 latency.
func run(b *testing.B, call caller, callers int) {
	b.Helper()
	ctx := context.Background()
	for i := 0; i < 200; i++ { // warm up
		if err := call(ctx); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, b.N)
	var next int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	var failed error
	b.ResetTimer()
	start := time.Now()
	for w := 0; w < callers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= int64(b.N) {
					return
				}
				t0 := time.Now()
				if err := call(ctx); err != nil {
					mu.Lock()
					failed = err
					mu.Unlock()
					return
				}
				lat[i] = time.Since(t0)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if failed != nil {
		dumpStacks() // a failed call leaves every goroutine's stack for the post-mortem
		b.Fatal(failed)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "calls/s")
}

// BenchmarkToolCall compares a call through the bus with the direct stdio
// baseline, for 1 and 8 concurrent callers.
func BenchmarkToolCall(b *testing.B) {
	for _, callers := range []int{1, 8} {
		b.Run(fmt.Sprintf("direct/callers=%d", callers), func(b *testing.B) { run(b, direct(b), callers) })
		b.Run(fmt.Sprintf("bus/callers=%d", callers), func(b *testing.B) { run(b, viaBus(b), callers) })
		b.Run(fmt.Sprintf("bus-inprocess/callers=%d", callers), func(b *testing.B) { run(b, viaBusInProcess(b), callers) })
	}
}
