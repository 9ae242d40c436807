package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/testkit"
)

// TestStdioStallStress hunts the go-sdk stdio stall (docs/benchmarks.md, "A
// go-sdk stdio stall seen while benchmarking") with no mcpbus code: a go-sdk
// client calls the test server's echo over real pipes, a new goroutine per
// call, MCPBUS_STALL_WORKERS (16) at a time, for MCPBUS_STALL_STRESS (a
// duration, e.g. 4m; unset: skipped, as a run takes minutes of both cores).
// MCPBUS_STALL_SHORT_US=n gives every other call a random deadline of up to
// n µs, so cancellations race responses.
//
// A call still out after MCPBUS_STALL_AFTER (3s) is a stall: the test writes, into
// MCPBUS_STALL_DIR (default a temp dir it names), the client's goroutines,
// the last 4 MiB written to and read from the server, the bytes waiting in
// each pipe, and the server's goroutines (SIGQUIT, to server.stderr); then fails.
func TestStdioStallStress(t *testing.T) {
	st := testkit.StallStressFromEnv(t)
	stderr, err := os.Create(filepath.Join(st.Dir, "server.stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	cmd := exec.Command(testServer)
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The same pipes CommandTransport makes, each side recorded.
	written, read := &tailBuf{}, &tailBuf{}
	tr := &mcp.IOTransport{Reader: tapReader{stdout, read}, Writer: tapWriter{stdin, written}}
	ctx := context.Background()
	sess, err := mcp.NewClient(&mcp.Implementation{Name: "stall", Version: "1"}, nil).Connect(ctx, tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = sess.Close()
		_ = cmd.Wait()
	}()

	st.Run(t, func(ctx context.Context, msg string) error {
		res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": msg}})
		switch {
		case err != nil:
			return err
		case !echoed(res, msg):
			return fmt.Errorf("wrong result %+v", res.Content)
		}
		return nil
	}, func(msg string) { postMortem(t, st.Dir, cmd.Process.Pid, msg, written, read) })
}

// postMortem records a stalled call msg: see TestStdioStallStress.
func postMortem(t *testing.T, dir string, pid int, msg string, written, read *tailBuf) {
	buf := make([]byte, 16<<20)
	buf = buf[:runtime.Stack(buf, true)]
	w, r := written.bytes(), read.bytes()
	summary := fmt.Sprintf("stalled call %q: request written %v, response read %v\n%s",
		msg, strings.Contains(string(w), `"`+msg+`"`), strings.Contains(string(r), `"`+msg+`"`), pipeQueues(pid))
	for name, b := range map[string][]byte{"client.stacks": buf, "client.written": w, "client.read": r, "summary": []byte(summary)} {
		_ = os.WriteFile(filepath.Join(dir, name), b, 0o600)
	}
	_ = syscall.Kill(pid, syscall.SIGQUIT) // the Go runtime prints every goroutine to stderr
	t.Log(summary)
}

// tailBuf keeps the last 4–8 MiB that went through one side of a pipe.
type tailBuf struct {
	mu  sync.Mutex
	buf []byte
}

func (b *tailBuf) add(p []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > 8<<20 {
		b.buf = append([]byte(nil), b.buf[len(b.buf)-4<<20:]...)
	}
}

func (b *tailBuf) bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]byte(nil), b.buf...)
}

type tapReader struct {
	r   io.ReadCloser
	tap *tailBuf
}

func (x tapReader) Read(p []byte) (int, error) {
	n, err := x.r.Read(p)
	x.tap.add(p[:n])
	return n, err
}

func (x tapReader) Close() error { return x.r.Close() }

type tapWriter struct {
	w   io.WriteCloser
	tap *tailBuf
}

func (x tapWriter) Write(p []byte) (int, error) {
	n, err := x.w.Write(p)
	x.tap.add(p[:n])
	return n, err
}

func (x tapWriter) Close() error { return x.w.Close() }

// echoed reports whether res is echo's answer to msg.
func echoed(res *mcp.CallToolResult, msg string) bool {
	if len(res.Content) != 1 {
		return false
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	return ok && tc.Text == msg
}
