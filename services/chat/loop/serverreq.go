//lint:file-ignore SA1019 sampling and roots are deprecated by protocol 2026-07-28 (SEP-2577) but work for at least twelve months, and servers of older protocols use them: mcpbus relays them.

package loop

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/chat/provider"
)

type serverRequestsKey struct{}

// withServerRequests hands the answerer of the MCP server's own requests
// during a tool call to ToolCaller.Call through ctx.
func withServerRequests(ctx context.Context, fn func(context.Context, model.ClientRequest) (any, error)) context.Context {
	return context.WithValue(ctx, serverRequestsKey{}, fn)
}

// ServerRequests is the answerer withServerRequests put in ctx, or nil.
func ServerRequests(ctx context.Context) func(context.Context, model.ClientRequest) (any, error) {
	fn, _ := ctx.Value(serverRequestsKey{}).(func(context.Context, model.ClientRequest) (any, error))
	return fn
}

// answerServer answers what a server asks of its client during one of the
// turn's tool calls. Sampling goes to the profile's own model when the
// profile allows it (sampling: allow); elicitation is declined, since a turn
// has no way yet to put a server's form to the user.
func (t *turn) answerServer(ctx context.Context, req model.ClientRequest) (any, error) {
	switch req.Method {
	case model.MethodElicit:
		return &mcp.ElicitResult{Action: "decline"}, nil
	case model.MethodCreateMessage:
		if t.profile.Sampling != model.SamplingAllow {
			return nil, apierr.Newf(apierr.Unauthorized, "chat profile %s does not let servers sample its model (sampling: allow)", t.profile.Name)
		}
		var p mcp.CreateMessageParams
		if err := json.Unmarshal(req.Params, &p); err != nil {
			return nil, apierr.Invalid("params", "sampling params: "+err.Error())
		}
		preq := provider.Request{System: p.SystemPrompt, MaxTokens: int(p.MaxTokens)}
		for _, m := range p.Messages {
			text, ok := m.Content.(*mcp.TextContent)
			if !ok {
				return nil, apierr.Invalid("params", "sampling: only text messages are supported")
			}
			role := provider.User
			if m.Role == "assistant" {
				role = provider.Assistant
			}
			preq.Messages = append(preq.Messages, provider.Message{Role: role, Text: text.Text})
		}
		step, err := t.model.Step(ctx, preq, nil)
		if err != nil {
			return nil, err
		}
		stop := "endTurn"
		if step.StopReason == provider.StopMaxTokens {
			stop = "maxTokens"
		}
		return &mcp.CreateMessageResult{Model: t.profile.Model, Role: "assistant",
			Content: &mcp.TextContent{Text: strings.TrimSpace(step.Text)}, StopReason: stop}, nil
	}
	return nil, apierr.Newf(apierr.Validation, "the chat does not answer %s", req.Method)
}
