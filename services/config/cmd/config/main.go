// Command mcpbus-config runs the config service alone against an existing NATS
// server, exactly as inside `mcpbus up` (same settings, same code); it is
// `mcpbus serve config` as its own binary, for a container of one service.
package main

import (
	"os"

	"github.com/mcpbus/mcpbus/libs/service"
	"github.com/mcpbus/mcpbus/services/config/config"
)

func main() {
	os.Exit(service.Main(config.Definition(), os.Args[1:], os.Stderr))
}
