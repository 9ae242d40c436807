package cli

import (
	"encoding/json"
	"io"
	"strings"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// toolCallArgs reads the `<server>.<tool> ['<json arguments>' | -]`
// arguments of the commands that call a tool (call, tasks run): the tool's
// name, and its arguments as given, read from stdin for "-", or none.
func toolCallArgs(g *globals, args []string) (server, tool string, raw json.RawMessage, err error) {
	server, tool, ok := strings.Cut(args[0], ".")
	if !ok || server == "" || tool == "" {
		return "", "", nil, apierr.Invalid("tool", "name the tool as <server>.<tool>")
	}
	if len(args) < 2 {
		return server, tool, nil, nil
	}
	if args[1] != "-" {
		return server, tool, json.RawMessage(args[1]), nil
	}
	b, err := io.ReadAll(g.stdin)
	if err != nil {
		return "", "", nil, err
	}
	return server, tool, b, nil
}
