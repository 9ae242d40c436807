package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// toolCallArgs reads the `<server>.<tool> ['<json arguments>' | -]`
// arguments of the commands that call a tool (call, tasks run): the tool's
// name, and its arguments as given, read from stdin for "-", or none. The
// arguments must be a JSON object: checked here, before anything connects,
// so a typo is a VALIDATION_ERROR even with no bus to send it to, and an
// empty stdin (the command feeding it failed) calls nothing.
func toolCallArgs(g *globals, args []string) (server, tool string, raw json.RawMessage, err error) {
	server, tool, ok := strings.Cut(args[0], ".")
	if !ok || server == "" || tool == "" {
		return "", "", nil, apierr.Invalid("tool", "name the tool as <server>.<tool>")
	}
	if len(args) < 2 {
		return server, tool, nil, nil
	}
	raw = json.RawMessage(args[1])
	if args[1] == "-" {
		b, err := io.ReadAll(g.stdin)
		if err != nil {
			return "", "", nil, apierr.Wrap(apierr.Validation, "reading the arguments from stdin: "+err.Error(), err).WithField("arguments")
		}
		if len(bytes.TrimSpace(b)) == 0 {
			return "", "", nil, apierr.Invalid("arguments", "no arguments on stdin: give a JSON object ({} for none)")
		}
		raw = b
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return "", "", nil, apierr.Invalid("arguments", "arguments must be a JSON object")
	}
	return server, tool, raw, nil
}
