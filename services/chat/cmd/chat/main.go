// Command mcpbus-chat runs the chat service alone against an existing NATS
// server, exactly as inside `mcpbus up` (same settings, same code); it is
// `mcpbus serve chat` as its own binary, for a container of one service.
package main

import (
	"os"

	"github.com/mcpbus/mcpbus/libs/service"
	"github.com/mcpbus/mcpbus/services/chat/chat"
)

func main() {
	os.Exit(service.Main(chat.Definition(), os.Args[1:], os.Stderr))
}
