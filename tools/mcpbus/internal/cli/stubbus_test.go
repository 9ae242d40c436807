package cli

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

// stubBus starts an embedded NATS server for a test of the CLI, with no
// operator seed of a real mcpbus up in reach, and a micro service named name
// answering each subject of handlers. It returns the server's URL and the
// connection the service is on.
func stubBus(t *testing.T, name string, handlers map[string]micro.HandlerFunc) (string, *nats.Conn, micro.Service) {
	t.Helper()
	t.Setenv("MCPBUS_DATA_DIR", t.TempDir())
	ns, err := embednats.Start(embednats.Options{Port: 0, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	nc := testkit.Connect(t, ns)
	svc, err := micro.AddService(nc, micro.Config{Name: name, Version: "0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	for subj, h := range handlers {
		if err := svc.AddEndpoint(strings.ReplaceAll(subj, ".", "-"), h, micro.WithEndpointSubject(subj)); err != nil {
			t.Fatal(err)
		}
	}
	// The endpoints' subscriptions reach the server only with the next
	// flush: a CLI connecting at once could find no responder (CI: "no
	// service is answering mcp.v1.registry.search").
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return ns.ClientURL(), nc, svc
}
