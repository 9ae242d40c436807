package provider

import (
	"fmt"
	"io"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

func invalidRole(r Role) error {
	return apierr.Invalid("messages", fmt.Sprintf("unknown message role %q", r))
}

func invalidSchema(tool string, err error) error {
	return apierr.Invalid("tools", fmt.Sprintf("tool %s: input schema is not a JSON object: %v", tool, err))
}

// errCutShort ends a stream whose body ended before the answer's end (its
// finish_reason, its message_stop): a server or proxy stopped mid-answer,
// and the text so far is not the answer. A network failure (classifyOther).
var errCutShort = fmt.Errorf("the stream ended before the answer did: %w", io.ErrUnexpectedEOF)
