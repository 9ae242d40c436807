// Command mcpbus-registry runs the registry service alone against an existing NATS
// server, exactly as inside `mcpbus up` (same settings, same code); it is
// `mcpbus serve registry` as its own binary, for a container of one service.
package main

import (
	"os"

	"github.com/mcpbus/mcpbus/libs/service"
	"github.com/mcpbus/mcpbus/services/registry/registry"
)

func main() {
	os.Exit(service.Main(registry.Definition(), os.Args[1:], os.Stderr))
}
