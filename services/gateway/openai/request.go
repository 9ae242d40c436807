package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/mcpbus/mcpbus/libs/model"
)

// CompletionRequest is the part of an OpenAI chat completion request the
// gateway reads. Sampling fields (temperature, max_tokens…) are accepted and
// ignored: the profile decides the model's settings. Fields whose answer a
// client relies on and mcpbus cannot give (client tools, a forced tool call,
// a JSON answer, log probabilities, several choices) are refused.
type CompletionRequest struct {
	Model          string          `json:"model"`
	Messages       []Message       `json:"messages"`
	Stream         bool            `json:"stream,omitempty"`
	StreamOptions  *StreamOptions  `json:"stream_options,omitempty"`
	Tools          json.RawMessage `json:"tools,omitempty"`
	Functions      json.RawMessage `json:"functions,omitempty"`
	ToolChoice     json.RawMessage `json:"tool_choice,omitempty"`
	ResponseFormat *struct {
		Type string `json:"type"`
	} `json:"response_format,omitempty"`
	Logprobs bool `json:"logprobs,omitempty"`
	N        *int `json:"n,omitempty"`
}

// StreamOptions are the options of a streamed completion.
type StreamOptions struct {
	// IncludeUsage adds a last chunk with the turn's usage and no choices.
	IncludeUsage bool `json:"include_usage"`
}

// Message is one message of a request. Content is a string or an array of
// content parts (only text parts are understood).
type Message struct {
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	ToolCalls json.RawMessage `json:"tool_calls,omitempty"`
}

// contentPart is one element of an array content.
type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// parse turns the request into the chat service's send: the last message
// (role user) is the message, the earlier ones its context.
func (req *CompletionRequest) parse() (model.ChatSendRequest, *Error) {
	var out model.ChatSendRequest
	switch {
	case strings.TrimSpace(req.Model) == "":
		return out, invalid("model", "model is required: the name of a chat profile (GET /v1/models)")
	case len(req.Messages) == 0:
		return out, invalid("messages", "messages must hold at least one message")
	case req.N != nil && *req.N != 1:
		return out, invalid("n", "only n=1 is supported")
	case given(req.Tools):
		return out, invalid("tools", "tools are not accepted: mcpbus runs the tools of the profile itself and answers with the result")
	case given(req.Functions):
		return out, invalid("functions", "functions are not accepted: mcpbus runs the tools of the profile itself and answers with the result")
	case given(req.ToolChoice) && !slices.Contains([]string{`"auto"`, `"none"`}, string(bytes.TrimSpace(req.ToolChoice))):
		return out, invalid("tool_choice", `tool_choice can only be "auto" (the model may call the profile's tools, run by mcpbus) or "none" (no tool): the client gives no tools, so none can be named or required`)
	case req.ResponseFormat != nil && req.ResponseFormat.Type != "" && req.ResponseFormat.Type != "text":
		return out, invalid("response_format", fmt.Sprintf("response_format %q is not supported: the answer is the model's text (ask for JSON in the message)", req.ResponseFormat.Type))
	case req.Logprobs:
		return out, invalid("logprobs", "logprobs are not supported")
	case req.StreamOptions != nil && !req.Stream:
		return out, invalid("stream_options", "stream_options is only allowed when stream is true")
	}
	last := len(req.Messages) - 1
	for i, m := range req.Messages {
		param := fmt.Sprintf("messages[%d]", i)
		if given(m.ToolCalls) {
			return out, invalid(param+".tool_calls", "client-side tool calls are not supported: mcpbus runs the tools itself")
		}
		text, err := contentText(param, m.Content)
		if err != nil {
			return out, err
		}
		role := m.Role
		switch role {
		case "developer": // OpenAI's newer name for system
			role = model.ChatRoleSystem
		case model.ChatRoleSystem, model.ChatRoleUser, model.ChatRoleAssistant:
		case "tool", "function":
			return out, invalid(param+".role", "role "+role+" is not supported: mcpbus runs the tools itself")
		default:
			return out, invalid(param+".role", fmt.Sprintf("unknown role %q (system, developer, user or assistant)", m.Role))
		}
		if i == last {
			if role != model.ChatRoleUser {
				return out, invalid(param+".role", "the last message must be the user's")
			}
			if strings.TrimSpace(text) == "" {
				return out, invalid(param+".content", "the last message is empty")
			}
			out.Message = text
			break
		}
		out.Context = append(out.Context, model.ChatContextMessage{Role: role, Content: text})
	}
	out.Profile = req.Model
	// "none" is OpenAI's "call no tool": the turn is offered none and runs
	// none (ignoring it would let a client that relies on it set off tools
	// that change things).
	out.NoTools = string(bytes.TrimSpace(req.ToolChoice)) == `"none"`
	return out, nil
}

// given reports whether a field of the request holds a value: not absent,
// null or an empty list.
func given(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && !bytes.Equal(raw, []byte("null")) && !bytes.Equal(raw, []byte("[]"))
}

// contentText is the text of a content: a string, null, or an array of text
// parts (joined by newlines).
func contentText(param string, raw json.RawMessage) (string, *Error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", invalid(param+".content", "content is not a valid string")
		}
		return s, nil
	}
	var parts []contentPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", invalid(param+".content", "content must be a string or an array of text parts")
	}
	texts := make([]string, 0, len(parts))
	for j, p := range parts {
		if p.Type != "text" {
			return "", invalid(fmt.Sprintf("%s.content[%d].type", param, j),
				fmt.Sprintf("content part type %q is not supported: only text parts", p.Type))
		}
		texts = append(texts, p.Text)
	}
	return strings.Join(texts, "\n"), nil
}

// requestParam names, in the request's own terms, the field of the send it
// became (as the chat service's validation names it): the last message is
// the send's message, the earlier ones its context, one for one.
func requestParam(field string, last int) string {
	switch {
	case field == "message":
		return fmt.Sprintf("messages[%d].content", last)
	case field == "context":
		return "messages"
	case field == "profile":
		return "model"
	}
	if rest, ok := strings.CutPrefix(field, "context."); ok {
		i, sub, _ := strings.Cut(rest, ".")
		if n, err := strconv.Atoi(i); err == nil && n >= 0 && n < last {
			if sub == "" {
				return fmt.Sprintf("messages[%d]", n)
			}
			return fmt.Sprintf("messages[%d].%s", n, sub)
		}
	}
	return field
}
