package serverfile

import (
	"encoding/json"
	"fmt"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// VS Code's mcp.json is read as the mcpServers format: its servers are under
// "servers" (mcpServersKey), it may have comments and trailing commas
// (decode), and "inputs" declares the values VS Code prompts for, referred to
// as ${input:id}. It is told from mcp.yaml by being JSON with no transport
// blocks (isMCPYAML). Render has no VS Code layout: it writes mcpServers.

// vscodeInput is one input. Only a password input matters to an import: a
// reference to it is secret. Its other fields, and an id or password of
// another type, are VS Code's business.
type vscodeInput struct {
	ID       string
	Password bool
}

func (in *vscodeInput) UnmarshalJSON(data []byte) error {
	*in = vscodeInput{}
	return eachField(data, "an input must be a mapping", func(k string, v json.RawMessage) error {
		switch {
		case k == "id" && kindOf(v) == '"':
			return json.Unmarshal(v, &in.ID)
		case k == "password":
			in.Password = kindOf(v) == 't'
		}
		return nil
	})
}

// readInputs marks the inputs declared with "password": true as secret.
func readInputs(raw json.RawMessage, r *resolver) error {
	switch kindOf(raw) {
	case 0, 'n': // none
		return nil
	case '[':
	default:
		return apierr.Invalid("inputs", "inputs must be a list")
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return fieldAt("inputs", err)
	}
	for i, item := range items {
		var in vscodeInput
		if err := json.Unmarshal(item, &in); err != nil {
			return fieldAt(fmt.Sprintf("inputs[%d]", i), err)
		}
		if in.Password && in.ID != "" {
			r.secret[in.ID] = true
		}
	}
	return nil
}
