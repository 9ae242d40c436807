// Package gctune sets the garbage collector of an mcpbus process.
//
// mcpbus's services keep little live data but allocate per message: go-sdk
// v1.8.0 decodes every JSON-RPC message through a decoder that allocates a
// fresh 32 KiB buffer, ~10 of them per tool call through the gateway. With
// Go's default GOGC=100 and a live heap of a few MiB, a collection then runs
// every few dozen calls and its fixed cost (scanning the stacks of hundreds
// of goroutines: NATS, sessions, servers) takes a quarter of the CPU.
package gctune

import (
	"os"
	"runtime/debug"
)

// Percent is the GOGC mcpbus processes run with unless GOGC is set: the heap
// may grow to five times the live data between collections.
const Percent = 400

// Apply sets GOGC to Percent unless the environment sets GOGC. It changes this
// process only: MCP servers started from it keep Go's default.
func Apply() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(Percent)
	}
}
