package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/embednats"
)

// naive is the simplest possible forwarder, for reference: a NATS
// subscription whose messages each start a goroutine that calls the tool
// through go-sdk and replies with the marshalled result.
func naive(b *testing.B) caller {
	b.Helper()
	ns, err := embednats.Start(embednats.Options{Port: -1, StoreDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(ns.Stop)
	srv, err := ns.Connect()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Close)
	client := mcp.NewClient(&mcp.Implementation{Name: "naive", Version: "1"}, nil)
	sess, err := client.Connect(context.Background(), &mcp.CommandTransport{Command: exec.Command(testServer)}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sess.Close() })
	if _, err := srv.QueueSubscribe("naive.echo", "q", func(m *nats.Msg) {
		go func() {
			res, err := sess.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: json.RawMessage(m.Data)})
			if err != nil {
				_ = m.Respond([]byte(err.Error()))
				return
			}
			data, _ := json.Marshal(res)
			_ = m.Respond(data)
		}()
	}); err != nil {
		b.Fatal(err)
	}
	cli, err := ns.ConnectTCP()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cli.Close)
	return func(ctx context.Context) error {
		_, err := cli.RequestWithContext(ctx, "naive.echo", echoArgs)
		return err
	}
}

// BenchmarkNaiveForwarder is the reference point for the bus's own overhead.
func BenchmarkNaiveForwarder(b *testing.B) {
	for _, callers := range []int{1, 8} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) { paired(b, same(naive(b), callers), same(direct(b), callers)) })
	}
}
