package launch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/testkit"
)

// testServer is the go-sdk test server (libs/testmcp), built once.
var testServer string

func TestMain(m *testing.M) {
	if ttyRoles() {
		return
	}
	testkit.Main(m, &testServer)
}

// connectTest starts the test server on a StdioTransport and connects a
// go-sdk client as the runner does; both end with the test.
func connectTest(t *testing.T, env ...string) (*mcp.ClientSession, *StdioConn, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(testServer)
	cmd.Env = append(os.Environ(), env...)
	tr := &StdioTransport{Command: cmd, TerminateDuration: time.Second}
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{
		Capabilities:           &mcp.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sess, err := client.Connect(ctx, tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	// As the runner's start does: a request from go-sdk after the handshake.
	if _, err := sess.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if tr.Conn() == nil || !tr.Conn().HasRequestMeta() {
		t.Fatalf("conn %v: no request _meta captured", tr.Conn())
	}
	return sess, tr.Conn(), cmd
}

func resultText(t *testing.T, raw []byte) string {
	t.Helper()
	var r mcp.CallToolResult
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("not a CallToolResult: %v: %.200s", err, raw)
	}
	if len(r.Content) == 0 {
		t.Fatalf("no content: %.200s", raw)
	}
	return r.Content[0].(*mcp.TextContent).Text
}

func rawCall(t *testing.T, c *StdioConn, tool, args string) (json.RawMessage, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, _, err := c.CallTool(ctx, tool, json.RawMessage(args), nil)
	return res, err
}

// Raw calls and go-sdk's traffic share one connection without cross-talk:
// 100 concurrent raw calls each get their own result while go-sdk lists
// tools, pings and reads a resource.
func TestRawCallsBesideGoSDK(t *testing.T) {
	sess, conn, _ := connectTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := range 100 {
		wg.Go(func() {
			msg := fmt.Sprintf("call %d %s", i, strings.Repeat("y", i*37))
			args, _ := json.Marshal(map[string]string{"message": msg})
			res, id, err := conn.CallTool(ctx, "echo", args, nil)
			if err != nil {
				errs <- fmt.Errorf("raw call %d: %w", i, err)
				return
			}
			if !strings.HasPrefix(id.String(), "mcpbus-") {
				errs <- fmt.Errorf("raw call id %q", id)
			}
			if got := resultText(t, res); got != msg {
				errs <- fmt.Errorf("raw call %d got %.40q", i, got)
			}
		})
	}
	for i := range 20 {
		wg.Go(func() {
			var err error
			switch i % 4 {
			case 0:
				var lt *mcp.ListToolsResult
				if lt, err = sess.ListTools(ctx, nil); err == nil && len(lt.Tools) == 0 {
					err = errors.New("no tools")
				}
			case 1:
				err = sess.Ping(ctx, nil)
			case 2:
				var rr *mcp.ReadResourceResult
				if rr, err = sess.ReadResource(ctx, &mcp.ReadResourceParams{URI: "test://greeting"}); err == nil && rr.Contents[0].Text != "hello from mcpbus-testserver" {
					err = fmt.Errorf("resource %q", rr.Contents[0].Text)
				}
			case 3:
				var res *mcp.CallToolResult
				if res, err = sess.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": fmt.Sprint("sdk ", i)}}); err == nil &&
					res.Content[0].(*mcp.TextContent).Text != fmt.Sprint("sdk ", i) {
					err = fmt.Errorf("go-sdk call got %v", res.Content[0])
				}
			}
			if err != nil {
				errs <- fmt.Errorf("go-sdk request %d: %w", i, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	conn.mu.Lock()
	left := len(conn.pending)
	conn.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d raw waiters left", left)
	}
}

// A result of several MiB passes byte for byte: what go-sdk's path gives
// after decoding and encoding it again is the same JSON.
func TestRawCallLargeResult(t *testing.T) {
	sess, conn, _ := connectTest(t)
	const size = 5 << 20
	raw, err := rawCall(t, conn, "large", fmt.Sprintf(`{"bytes":%d}`, size))
	if err != nil {
		t.Fatal(err)
	}
	if got := resultText(t, raw); len(got) != size || strings.Trim(got, "x") != "" {
		t.Fatalf("text of %d bytes", len(got))
	}
	res, err := sess.CallTool(context.Background(), &mcp.CallToolParams{Name: "large", Arguments: map[string]any{"bytes": size}})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(res)
	if string(raw) != string(want) {
		t.Fatalf("raw result (%d bytes) differs from go-sdk's (%d bytes): %.120s… vs %.120s…", len(raw), len(want), raw, want)
	}
	// And the connection carries on with small lines.
	if raw, err := rawCall(t, conn, "echo", `{"message":"after"}`); err != nil || resultText(t, raw) != "after" {
		t.Fatalf("after the large result: %v", err)
	}
}

// A raw call whose context ends sends notifications/cancelled (the server
// sees it), returns the context's error, and the next call works.
func TestRawCallCancelled(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "cancelled")
	_, conn, _ := connectTest(t, "TESTMCP_CANCEL_FILE="+marker)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	begin := time.Now()
	_, _, err := conn.CallTool(ctx, "sleep", json.RawMessage(`{"ms":20000}`), nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want the deadline", err)
	}
	if d := time.Since(begin); d > 2*time.Second {
		t.Fatalf("returned after %s", d)
	}
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(marker); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the server never saw notifications/cancelled")
		}
	}
	if raw, err := rawCall(t, conn, "echo", `{"message":"next"}`); err != nil || resultText(t, raw) != "next" {
		t.Fatalf("next call: %v", err)
	}
}

// A server that exits fails the waiting raw call at once, with an error
// wrapping mcp.ErrConnectionClosed (the runner's SERVICE_UNAVAILABLE), and go-sdk's
// session ends too (the runner restarts the server on that).
func TestRawCallServerExits(t *testing.T) {
	for _, how := range []string{"killed", "crash tool"} {
		t.Run(how, func(t *testing.T) {
			sess, conn, cmd := connectTest(t)
			errc := make(chan error, 1)
			go func() {
				tool, args := "sleep", `{"ms":20000}`
				if how == "crash tool" {
					tool, args = "crash", `{}`
				}
				_, err := rawCall(t, conn, tool, args)
				errc <- err
			}()
			if how == "killed" {
				time.Sleep(200 * time.Millisecond)
				if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
			begin := time.Now()
			select {
			case err := <-errc:
				if !errors.Is(err, mcp.ErrConnectionClosed) {
					t.Fatalf("err %v, want ErrConnectionClosed", err)
				}
				if d := time.Since(begin); d > time.Second {
					t.Fatalf("failed after %s", d)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("raw call hung after the server exited")
			}
			done := make(chan error, 1)
			go func() { done <- sess.Wait() }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("go-sdk's session did not end")
			}
			if _, err := rawCall(t, conn, "echo", `{"message":"x"}`); !errors.Is(err, mcp.ErrConnectionClosed) {
				t.Fatalf("call after exit: %v", err)
			}
		})
	}
}

// A JSON-RPC error response comes back as *jsonrpc.Error, as go-sdk's does;
// a tool error is a result with isError.
func TestRawCallErrors(t *testing.T) {
	sess, conn, _ := connectTest(t)
	_, err := rawCall(t, conn, "no_such_tool", `{}`)
	var wire *jsonrpc.Error
	if !errors.As(err, &wire) || wire.Code != jsonrpc.CodeInvalidParams {
		t.Fatalf("err %v, want a JSON-RPC invalid params error", err)
	}
	_, sdkErr := sess.CallTool(context.Background(), &mcp.CallToolParams{Name: "no_such_tool", Arguments: map[string]any{}})
	if sdkErr == nil || err.Error() != sdkErr.Error() {
		t.Fatalf("raw error %q, go-sdk's %q", err, sdkErr)
	}
	raw, err := rawCall(t, conn, "fail", `{"message":"boom"}`)
	if err != nil {
		t.Fatal(err)
	}
	isError, content, err := CheckToolResult(raw)
	if err != nil || !isError || !content || resultText(t, raw) != "failed: boom" {
		t.Fatalf("isError %v, content %v, err %v: %s", isError, content, err, raw)
	}
	if isError, content, err := CheckToolResult([]byte(`{"content":[{"type":"text","text":"\"isError\":true"}]}`)); err != nil || isError || !content {
		t.Fatalf("isError inside content counted: %v %v %v", isError, content, err)
	}
	if _, content, err := CheckToolResult([]byte(`{"content":null,"x":{"content":[]}}`)); err != nil || content {
		t.Fatalf("content null (or a nested one) taken for an array: %v %v", content, err)
	}
	for _, bad := range []string{``, `null`, `[1]`, `{"content":`, `"x"`} {
		if _, _, err := CheckToolResult([]byte(bad)); err == nil {
			t.Errorf("result %q accepted", bad)
		}
	}
}

// The request carries the caller's _meta members and the session's SEP-2575
// ones, and pretty-printed arguments are compacted onto one line.
func TestRawCallMetaAndArguments(t *testing.T) {
	_, conn, _ := connectTest(t)
	meta := AppendMetaMember(nil, "traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw, _, err := conn.CallTool(ctx, "meta", nil, meta)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(resultText(t, raw)), &got); err != nil {
		t.Fatal(err)
	}
	if got["traceparent"] != "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" || got[mcp.MetaKeyProtocolVersion] == nil {
		t.Fatalf("server saw _meta %v", got)
	}
	raw, _, err = conn.CallTool(ctx, "echo", json.RawMessage("{\n  \"message\": \"two\\nlines\"\n}\n"), nil)
	if err != nil || resultText(t, raw) != "two\nlines" {
		t.Fatalf("pretty arguments: %v %s", err, raw)
	}
}

// Close fails a waiting raw call at once and ends the child.
func TestRawCallClose(t *testing.T) {
	sess, conn, cmd := connectTest(t)
	errc := make(chan error, 1)
	go func() {
		_, err := rawCall(t, conn, "sleep", `{"ms":20000}`)
		errc <- err
	}()
	time.Sleep(200 * time.Millisecond)
	go func() { _ = sess.Close() }()
	select {
	case err := <-errc:
		if !errors.Is(err, mcp.ErrConnectionClosed) {
			t.Fatalf("err %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("raw call hung on Close")
	}
	for deadline := time.Now().Add(5 * time.Second); syscall.Kill(cmd.Process.Pid, 0) == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("child still running after Close")
		}
	}
}
