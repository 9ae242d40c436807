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
	"os/exec"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

var testServer string

func TestMain(m *testing.M) {
	testkit.Main(m, &testServer)
}

var echoArgs = json.RawMessage(`{"message":"benchmark payload of a typical small tool call"}`)

// direct connects a go-sdk client to a fresh test server over stdio.
func direct(b *testing.B) caller { b.Helper(); return directTool(b, "echo", echoArgs) }

// directTool is direct calling tool with args.
func directTool(b *testing.B, tool string, args json.RawMessage) caller {
	b.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	sess, err := client.Connect(context.Background(), &mcp.CommandTransport{Command: exec.Command(testServer)}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sess.Close() })
	return func(ctx context.Context) error {
		res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
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

// BenchmarkToolCall compares a call through the bus with the direct stdio
// baseline (paired), for 1 and 8 concurrent callers.
func BenchmarkToolCall(b *testing.B) {
	for _, callers := range []int{1, 8} {
		b.Run(fmt.Sprintf("bus/callers=%d", callers), func(b *testing.B) {
			paired(b, same(viaBus(b), callers), same(direct(b), callers))
		})
		b.Run(fmt.Sprintf("bus-inprocess/callers=%d", callers), func(b *testing.B) {
			paired(b, same(viaBusInProcess(b), callers), same(direct(b), callers))
		})
	}
}
