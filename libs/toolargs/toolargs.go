// Package toolargs words mcpbus's refusal of tool arguments that do not
// match the tool's input schema, one message wherever a call enters: on /mcp
// and the bus it is a tool result with isError (SEP-1303, so the model can
// correct its call), on POST /mcp/invoke a PARAMETER_ERROR.
package toolargs

import (
	"encoding/json"
	"fmt"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// Mismatch is the refusal of arguments to tool that fail its input schema
// with err (which names the failing constraint).
func Mismatch(tool string, err error) *apierr.Error {
	return apierr.Invalid("arguments", fmt.Sprintf("arguments do not match the input schema of %s: %v", tool, err))
}

// Result is the MCP CallToolResult of a refusal e, as JSON.
func Result(e *apierr.Error) []byte {
	type text struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	data, _ := json.Marshal(struct {
		Content []text `json:"content"`
		IsError bool   `json:"isError"`
	}{[]text{{"text", e.Message}}, true}) // cannot fail: strings and a bool
	return data
}
