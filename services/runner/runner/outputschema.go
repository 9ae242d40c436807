package runner

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/jsonscan"
	"github.com/mcpbus/mcpbus/libs/schemaguard"
	"github.com/mcpbus/mcpbus/libs/toolargs"
)

// A tool that declares an output schema must return structuredContent that
// conforms to it (MCP: servers MUST; clients SHOULD validate). Every front
// door serves the tool with its (pinned) schema, so mcpbus vouches for it:
// a result that breaks it would make a validating client (the TypeScript
// SDK's) throw on the call, and hand the others data of a shape they were
// told it cannot have. So the runner checks a successful result against
// the schema it listed (compiled once per listed tool, guarded by
// schemaguard like the input schema) and replies in its stead an isError
// result naming the violation. A schema mcpbus does not validate
// (schemaguard) is the server's word alone, as for arguments. A result
// too costly to check against the schema (schemaguard.ErrCostly: the server
// gives both, and a small schema and result can cost a core hours) is
// withheld, an isError result saying so: passing it unchecked would let a
// server past its schema by making the check costly.

// conform returns res, or what replaces it when its structuredContent does
// not conform to t's output schema: for a success, an isError result naming
// the violation; for an error (isError), the same error without its
// structuredContent (the TypeScript SDK checks an error's too, and its
// text is what the caller needs).
func (c *schemaCache) conform(t *mcp.Tool, res callReply) callReply {
	if t.OutputSchema == nil {
		return res
	}
	e := c.entry(t)
	if !e.declaresOutput {
		return res
	}
	why := ""
	found, costly := false, false
	// Every member a decoder may read as structuredContent counts: one
	// keeps the last of duplicate keys (Go's, JavaScript's), another might
	// keep the first; each unescapes a key, and Go's encoding/json matches
	// it in any letter case. Only the exact name is one every client sees.
	jsonscan.Members(res.data, func(rawKey, val []byte) bool {
		key := jsonscan.Key(rawKey)
		if !strings.EqualFold(key, "structuredContent") {
			return true
		}
		found = found || key == "structuredContent"
		if e.out == nil {
			return true
		}
		var v any
		if err := json.Unmarshal(val, &v); err != nil {
			why = err.Error()
		} else if err := e.out.Validate(v); err != nil {
			why, costly = err.Error(), errors.Is(err, schemaguard.ErrCostly)
		}
		return why == ""
	})
	switch {
	case res.isError && why != "":
		res.data = withoutStructured(res.data)
		return res
	case res.isError, found && why == "":
		return res
	case !found:
		why = "it has no structuredContent"
	case costly:
		return callReply{data: toolargs.Result(apierr.New(apierr.Validation, fmt.Sprintf(
			"the result of tool %s was withheld: its structuredContent is too costly to check against the tool's output schema (an enum or a choice of many entries over many values)", t.Name))), isError: true, checked: true}
	}
	return callReply{data: toolargs.Result(toolargs.OutputMismatch(t.Name, why)), isError: true, checked: true}
}

// withoutStructured is result (a JSON object) without any member a decoder
// may read as its structuredContent; the others are copied as spelled.
func withoutStructured(result []byte) []byte {
	return jsonscan.KeepMembers(result, func(key []byte) bool { return !strings.EqualFold(jsonscan.Key(key), "structuredContent") })
}
