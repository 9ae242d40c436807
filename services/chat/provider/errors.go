package provider

import (
	"fmt"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

func invalidRole(r Role) error {
	return apierr.Invalid("messages", fmt.Sprintf("unknown message role %q", r))
}

func invalidSchema(tool string, err error) error {
	return apierr.Invalid("tools", fmt.Sprintf("tool %s: input schema is not a JSON object: %v", tool, err))
}
