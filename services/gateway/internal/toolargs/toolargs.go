// Package toolargs words the gateway's refusal of tool arguments that do not
// match the tool's input schema: one message for /mcp, where it is a tool
// result with isError (SEP-1303, so the model can correct its call), and for
// POST /mcp/invoke, where it is a PARAMETER_ERROR.
package toolargs

import (
	"fmt"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// Mismatch is the refusal of arguments to tool that fail its input schema
// with err (which names the failing constraint).
func Mismatch(tool string, err error) *apierr.Error {
	return apierr.Invalid("arguments", fmt.Sprintf("arguments do not match the input schema of %s: %v", tool, err))
}
