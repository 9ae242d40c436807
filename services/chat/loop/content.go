package loop

import (
	"encoding/json"

	"go.opentelemetry.io/otel/attribute"

	"github.com/mcpbus/mcpbus/libs/secretscan"
	"github.com/mcpbus/mcpbus/libs/telemetry/conv"
	"github.com/mcpbus/mcpbus/services/chat/provider"
)

// The message content of chat spans (recorded only on the operator's
// opt-in), in the JSON shape of the GenAI conventions' gen_ai.input.messages
// and gen_ai.output.messages, each attribute redacted (scrub).

type otelPart struct {
	Type      string          `json:"type"`
	Content   string          `json:"content,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	Response  string          `json:"response,omitempty"`
}

type otelMessage struct {
	Role         string     `json:"role"`
	Parts        []otelPart `json:"parts"`
	FinishReason string     `json:"finish_reason,omitempty"`
}

// callParts are the parts of an assistant's text and tool calls.
func callParts(text string, calls []provider.ToolCall) []otelPart {
	parts := []otelPart{}
	if text != "" {
		parts = append(parts, otelPart{Type: "text", Content: text})
	}
	for _, c := range calls {
		// Arguments are the model's text, not always valid JSON.
		args := json.RawMessage(c.Arguments)
		if !json.Valid(args) {
			args, _ = json.Marshal(c.Arguments)
		}
		parts = append(parts, otelPart{Type: "tool_call", ID: c.ID, Name: c.Name, Arguments: args})
	}
	return parts
}

// inputContent is the system instructions and input messages of a request.
func inputContent(req provider.Request) []attribute.KeyValue {
	msgs := make([]otelMessage, 0, len(req.Messages))
	for _, m := range req.Messages {
		om := otelMessage{Role: string(m.Role)}
		switch m.Role {
		case provider.Assistant:
			om.Parts = callParts(m.Text, m.ToolCalls)
		case provider.Tool:
			for _, r := range m.ToolResults {
				om.Parts = append(om.Parts, otelPart{Type: "tool_call_response", ID: r.CallID, Response: r.Content})
			}
		default:
			om.Parts = []otelPart{{Type: "text", Content: m.Text}}
		}
		msgs = append(msgs, om)
	}
	out := []attribute.KeyValue{conv.GenAIInputMessages.String(contentText(msgs))}
	if req.System != "" {
		out = append(out, conv.GenAISystemInstructions.String(contentText([]otelPart{{Type: "text", Content: req.System}})))
	}
	return out
}

// outputContent is the output message of a reply (with the calls written
// as text when the profile runs them).
func outputContent(reply provider.Step, textCalls bool) attribute.KeyValue {
	calls := reply.ToolCalls
	if len(calls) == 0 && textCalls {
		calls = provider.TextToolCalls(reply.Text)
	}
	return conv.GenAIOutputMessages.String(contentText([]otelMessage{{Role: string(provider.Assistant),
		Parts: callParts(reply.Text, calls), FinishReason: string(reply.StopReason)}}))
}

// contentText is v as the JSON text of an attribute, redacted.
func contentText(v any) string {
	b, _ := json.Marshal(v)
	return scrub(string(b))
}

// scrub is content made fit for a span: every secret the scanner finds
// (gitleaks' rules, mcpbus API keys, nkey seeds) replaced by
// [REDACTED:<rule>], or the whole text withheld when that cannot be done in
// place. A user may paste a secret, the model pass it to a tool and a
// server return one: the runner's scan of arguments and results comes
// after the chat's spans record them, or not at all (a server with
// secret_scan off). The chat knows no server's secret values (the runner
// does), so only the rules find them here.
func scrub(text string) string {
	return secretscan.Scrub(text, nil, func(rules string) string {
		return "(withheld: it held a secret, rule " + rules + ")"
	})
}
