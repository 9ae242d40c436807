package launch

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/testkit"
)

// TestRawCallStallStress hunts a lost stdio call on the runner's own path:
// raw tools/call requests on StdioConn (what every plain call takes) to the
// go-sdk test server, a new goroutine per call, MCPBUS_STALL_WORKERS (16) at
// a time, for MCPBUS_STALL_STRESS (a duration; unset: skipped, as a run takes
// minutes of both cores). MCPBUS_STALL_SHORT_US=n gives every other call a
// random deadline of up to n µs, so notifications/cancelled races responses.
// A call out for MCPBUS_STALL_AFTER (3 s) fails the test after writing the runner side's
// goroutines to MCPBUS_STALL_DIR (default a temp dir) and SIGQUITting the
// server (its goroutines go to server.stderr there).
// tests/bench TestStdioStallStress is the same with go-sdk's own client.
func TestRawCallStallStress(t *testing.T) {
	st := testkit.StallStressFromEnv(t)
	stderr, err := os.Create(filepath.Join(st.Dir, "server.stderr"))
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
	st.Run(t, func(ctx context.Context, msg string) error {
		raw, _, err := conn.CallTool(ctx, "echo", json.RawMessage(`{"message":"`+msg+`"}`), nil)
		var res mcp.CallToolResult
		switch {
		case err != nil:
			return err
		case json.Unmarshal(raw, &res) != nil || len(res.Content) != 1 || !isText(res.Content[0], msg):
			return fmt.Errorf("wrong result %.200s", raw)
		}
		return nil
	}, func(msg string) {
		buf := make([]byte, 16<<20)
		_ = os.WriteFile(filepath.Join(st.Dir, "runner.stacks"), buf[:runtime.Stack(buf, true)], 0o600)
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGQUIT)
		t.Logf("call %s stalled", msg)
	})
}

// isText reports whether c is the text want.
func isText(c mcp.Content, want string) bool {
	tc, ok := c.(*mcp.TextContent)
	return ok && tc.Text == want
}
