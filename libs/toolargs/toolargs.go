// Package toolargs words mcpbus's refusal of tool arguments that do not
// match the tool's input schema, one message wherever a call enters: on /mcp
// and the bus it is a tool result with isError (SEP-1303, so the model can
// correct its call), on POST /mcp/invoke a PARAMETER_ERROR; and of a result
// that does not match the tool's output schema (the runner's check).
package toolargs

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// Mismatch is the refusal of arguments to tool that fail its input schema
// with err (which names the failing constraint).
func Mismatch(tool string, err error) *apierr.Error {
	return apierr.Invalid("arguments", fmt.Sprintf("arguments do not match the input schema of %s: %v", tool, err))
}

// maxViolation bounds the words of a result's violation: the validator
// quotes the offending value whole (Go syntax), and a server's result may
// be megabytes.
const maxViolation = 500

// OutputMismatch is what replaces a result of tool whose structuredContent
// does not conform to its output schema (why names the violation, clipped).
func OutputMismatch(tool, why string) *apierr.Error {
	if len(why) > maxViolation {
		cut := maxViolation
		for cut > 0 && !utf8.RuneStart(why[cut]) {
			cut--
		}
		why = why[:cut] + "…"
	}
	return apierr.New(apierr.Validation, fmt.Sprintf("the result of tool %s does not match its output schema: %s", tool, why))
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
