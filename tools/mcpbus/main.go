// Command mcpbus runs the whole system in one process (`mcpbus up`) and is
// the operator CLI for a running bus (tools, call, status, events, …).
package main

import (
	"os"

	"github.com/mcpbus/mcpbus/tools/mcpbus/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
