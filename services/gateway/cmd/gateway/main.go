// Command mcpbus-gateway runs the gateway service alone against an existing NATS
// server, exactly as inside `mcpbus up` (same settings, same code); it is
// `mcpbus serve gateway` as its own binary, for a container of one service.
package main

import (
	"os"

	"github.com/mcpbus/mcpbus/libs/service"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
)

func main() {
	os.Exit(service.Main(gateway.Definition(), os.Args[1:], os.Stderr))
}
