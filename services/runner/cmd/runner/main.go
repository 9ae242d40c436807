// Command mcpbus-runner runs the runner service alone against an existing NATS
// server, exactly as inside `mcpbus up` (same settings, same code); it is
// `mcpbus serve runner` as its own binary, for a container of one service.
package main

import (
	"os"

	"github.com/mcpbus/mcpbus/libs/service"
	"github.com/mcpbus/mcpbus/services/runner/runner"
)

func main() {
	os.Exit(service.Main(runner.Definition(), os.Args[1:], os.Stderr))
}
