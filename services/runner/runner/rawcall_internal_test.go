package runner

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/runner/internal/launch"
)

// rawAndSDK connects a go-sdk client to the test server over launch's stdio
// connection, as the runner does.
func rawAndSDK(t *testing.T, bin string) (*mcp.ClientSession, *launch.StdioConn) {
	t.Helper()
	cfg := &model.McpConfig{Name: "alpha", Slug: "alpha", Package: model.Package{Type: model.PackageBinary, Identifier: bin},
		Transport: model.Transport{Type: model.TransportStdio}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := launch.Prepare(ctx, cfg, nil, launch.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, tracedTransport{l.Transport}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Process.Stop(sess.Close, 100*time.Millisecond, time.Second) })
	if _, err := sess.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	return sess, l.Connected(sess).(*launch.StdioConn)
}

// callError maps the raw path's failures exactly as go-sdk's: a JSON-RPC
// error response, a timeout, and a connection that is gone.
func TestRawCallErrorsMapLikeGoSDK(t *testing.T) {
	bin, cleanup, err := testkit.BuildTestServer()
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	sess, raw := rawAndSDK(t, bin)
	both := func(tool, args string, timeout time.Duration) (rawErr, sdkErr error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		_, _, err := raw.CallTool(ctx, tool, json.RawMessage(args), nil)
		rawErr = callError(ctx, "alpha", tool, timeout, err)
		cancel()
		ctx, cancel = context.WithTimeout(context.Background(), timeout)
		_, err = sess.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: json.RawMessage(args)})
		sdkErr = callError(ctx, "alpha", tool, timeout, err)
		cancel()
		return rawErr, sdkErr
	}
	same := func(what string, rawErr, sdkErr error, code apierr.Code) {
		t.Helper()
		r, s := apierr.From(rawErr), apierr.From(sdkErr)
		if r.Code != code || s.Code != code || r.Message != s.Message || r.Field != s.Field {
			t.Errorf("%s: raw %s %q (%s), go-sdk %s %q (%s), want code %s", what, r.Code, r.Message, r.Field, s.Code, s.Message, s.Field, code)
		}
	}
	rawErr, sdkErr := both("no_such_tool", `{}`, 5*time.Second) // the server answers -32602
	same("JSON-RPC error", rawErr, sdkErr, apierr.Validation)
	rawErr, sdkErr = both("sleep", `{"ms":5000}`, 100*time.Millisecond)
	same("timeout", rawErr, sdkErr, apierr.Network)

	ended := make(chan error, 1)
	go func() { ended <- sess.Wait() }()
	if _, _, err := raw.CallTool(context.Background(), "crash", json.RawMessage(`{}`), nil); !errors.Is(err, mcp.ErrConnectionClosed) {
		t.Fatalf("crash: %v", err)
	}
	<-ended
	rawErr, sdkErr = both("echo", `{"message":"x"}`, time.Second)
	same("server gone", rawErr, sdkErr, apierr.ServiceUnavailable)
}
