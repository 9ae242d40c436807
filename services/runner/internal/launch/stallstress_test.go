package launch

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestRawCallStallStress hunts a lost stdio call on the runner's own path:
// raw tools/call requests on StdioConn (what every plain call takes) to the
// go-sdk test server, a new goroutine per call, MCPBUS_STALL_WORKERS (16) at
// a time, for MCPBUS_STALL_STRESS (a duration; unset: skipped, as a run takes
// minutes of both cores). MCPBUS_STALL_SHORT_US=n gives every other call a
// random deadline of up to n µs, so notifications/cancelled races responses.
// A call out for 3 s fails the test after writing the runner side's
// goroutines to MCPBUS_STALL_DIR (default a temp dir) and SIGQUITting the
// server (its goroutines go to server.stderr there).
// tests/bench TestStdioStallStress is the same with go-sdk's own client.
func TestRawCallStallStress(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("MCPBUS_STALL_STRESS"))
	if err != nil {
		t.Skip("set MCPBUS_STALL_STRESS to a duration (e.g. 4m) to run the stdio stall stress")
	}
	dir := os.Getenv("MCPBUS_STALL_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	workers, short := 16, 0
	if n, err := strconv.Atoi(os.Getenv("MCPBUS_STALL_WORKERS")); err == nil && n > 0 {
		workers = n
	}
	if n, err := strconv.Atoi(os.Getenv("MCPBUS_STALL_SHORT_US")); err == nil && n > 0 {
		short = n
	}
	stderr, err := os.Create(filepath.Join(dir, "server.stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	cmd := exec.Command(testServer)
	cmd.Stderr = stderr
	tr := &StdioTransport{Command: cmd, TerminateDuration: time.Second}
	ctx := context.Background()
	sess, err := mcp.NewClient(&mcp.Implementation{Name: "stall", Version: "1"}, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}}).Connect(ctx, tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if _, err := sess.ListTools(ctx, nil); err != nil { // as the runner's start: raw calls copy its _meta
		t.Fatal(err)
	}
	conn := tr.Conn()

	var calls, timedOut atomic.Int64
	var stalled atomic.Bool
	sem := make(chan struct{}, workers)
	var wg sync.WaitGroup
	for i, end := 0, time.Now().Add(d); time.Now().Before(end) && !stalled.Load(); i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			deadline := 10 * time.Second
			if short > 0 && i%2 == 1 {
				deadline = time.Duration(1+rand.IntN(short)) * time.Microsecond
			}
			cctx, cancel := context.WithTimeout(ctx, deadline)
			defer cancel()
			msg := fmt.Sprintf("stall-probe-%d", i)
			watch := time.AfterFunc(3*time.Second, func() {
				if stalled.CompareAndSwap(false, true) {
					buf := make([]byte, 16<<20)
					_ = os.WriteFile(filepath.Join(dir, "runner.stacks"), buf[:runtime.Stack(buf, true)], 0o600)
					_ = syscall.Kill(cmd.Process.Pid, syscall.SIGQUIT)
					t.Logf("call %s stalled", msg)
				}
			})
			raw, _, err := conn.CallTool(cctx, "echo", json.RawMessage(`{"message":"`+msg+`"}`), nil)
			watch.Stop()
			calls.Add(1)
			var res mcp.CallToolResult
			switch {
			case err != nil && cctx.Err() != nil:
				timedOut.Add(1)
			case err != nil:
				t.Errorf("call %s: %v", msg, err)
			case json.Unmarshal(raw, &res) != nil || len(res.Content) != 1 || !isText(res.Content[0], msg):
				t.Errorf("call %s: wrong result %.200s", msg, raw)
			}
		}()
	}
	wg.Wait()
	t.Logf("%d raw calls (%d ended by their deadline), stalled: %v", calls.Load(), timedOut.Load(), stalled.Load())
	if stalled.Load() {
		t.Fatalf("a call stalled; stacks in %s", dir)
	}
}

// isText reports whether c is the text want.
func isText(c mcp.Content, want string) bool {
	tc, ok := c.(*mcp.TextContent)
	return ok && tc.Text == want
}
