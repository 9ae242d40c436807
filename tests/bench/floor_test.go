package bench

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/embednats"
)

// natsEcho is the floor of any bus design: a caller over loopback TCP, a
// responder connected in process (as the runner is in mcpbus up) that
// answers at once.
func natsEcho(b *testing.B) caller {
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
	if _, err := srv.Subscribe("echo", func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
		b.Fatal(err)
	}
	cli, err := ns.ConnectTCP()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cli.Close)
	return func(ctx context.Context) error {
		_, err := cli.RequestWithContext(ctx, "echo", echoArgs)
		return err
	}
}

// BenchmarkNATSRequestFloor is the bare NATS request/reply floor.
func BenchmarkNATSRequestFloor(b *testing.B) {
	for _, callers := range []int{1, 8} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) { measure(b, same(natsEcho(b), callers)) })
	}
}
