// Command mcpbus-credential runs the credential service alone against an existing NATS
// server, exactly as inside `mcpbus up` (same settings, same code); it is
// `mcpbus serve credential` as its own binary, for a container of one service.
package main

import (
	"os"

	"github.com/mcpbus/mcpbus/libs/service"
	"github.com/mcpbus/mcpbus/services/credential/credential"
)

func main() {
	os.Exit(service.Main(credential.Definition(), os.Args[1:], os.Stderr))
}
