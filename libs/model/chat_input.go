package model

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// Actions of an answer to a server's request for input (elicitation).
const (
	InputAccept  = "accept"
	InputDecline = "decline"
	InputCancel  = "cancel"
)

// DefaultInputTimeout is how long a server's request for input waits for a
// person by default: the runner's --input-timeout, and the gateway's bound
// on a session client's answer. The call's own timeout stops meanwhile.
const DefaultInputTimeout = 10 * time.Minute

// ChatInput is a tool call's server asking the conversation's user for
// input during a turn (an MCP form elicitation): the member of the
// input_requested and input_answered events and of ChatPendingReply.Inputs.
type ChatInput struct {
	InputID string `json:"input_id"`
	// CallID and Tool (<server>__<tool>) are the tool call it came from.
	CallID string `json:"call_id"`
	Tool   string `json:"tool"`
	Server string `json:"server"`
	// Message is the server's text for the user.
	Message string `json:"message"`
	// RequestedSchema is the form: a flat object of primitive properties.
	RequestedSchema json.RawMessage `json:"requested_schema"`
	AskedAt         time.Time       `json:"asked_at"`
	// ExpiresAt is when an unanswered input is cancelled (zero when the
	// chat declined it at once).
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// Action is how it was answered (input_answered only).
	Action string `json:"action,omitempty"`
	// Reason says why the chat answered it itself (a timeout).
	Reason string `json:"reason,omitempty"`
}

// ChatAnswerRequest is the body of mcp.v1.chat.answer: the user's answer
// to a pending input. Content (accept only) must match the input's
// requested schema.
type ChatAnswerRequest struct {
	Conversation string         `json:"conversation"`
	InputID      string         `json:"input_id"`
	Action       string         `json:"action"`
	Content      map[string]any `json:"content,omitempty"`
}

// ChatAnswerReply confirms the answer was recorded (the request repeated).
type ChatAnswerReply = ChatAnswerRequest

// Validate checks the request's shape; the content is checked against the
// input's schema by the chat service.
func (r *ChatAnswerRequest) Validate() *apierr.Error {
	if e := checkConversation(r.Conversation); e != nil {
		return e
	}
	if strings.TrimSpace(r.InputID) == "" || !ValidConversationID(r.InputID) {
		return apierr.Invalid("input_id", "input_id is required (the id of the input_requested event)")
	}
	switch r.Action {
	case InputAccept:
	case InputDecline, InputCancel:
		if len(r.Content) > 0 {
			return apierr.Invalid("content", "content goes with accept only")
		}
	default:
		return apierr.Invalid("action", "action must be accept, decline or cancel")
	}
	return nil
}
