//lint:file-ignore SA1019 sampling and roots are deprecated by protocol 2026-07-28 (SEP-2577) but work for at least twelve months, and servers of older protocols use them: mcpbus relays them.

package loop

import (
	"context"
	"encoding/json"
	"strings"
	"sync"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/elicitform"
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

// answerServer answers what a server asks of its client during the turn's
// tool call c. Sampling goes to the profile's own model when the profile
// allows it (sampling: allow); elicitation is put to the user (elicit).
func (t *turn) answerServer(ctx context.Context, c StepCall, req model.ClientRequest) (any, error) {
	switch req.Method {
	case model.MethodElicit:
		return t.elicit(ctx, c, req)
	case model.MethodCreateMessage:
		if t.profile.Sampling != model.SamplingAllow {
			return nil, apierr.Newf(apierr.Unauthorized, "chat profile %s does not let servers sample its model (sampling: allow)", t.profile.Name)
		}
		var p mcp.CreateMessageParams
		if err := json.Unmarshal(req.Params, &p); err != nil {
			return nil, apierr.Invalid("params", "sampling params: "+err.Error())
		}
		return t.sample(ctx, p)
	}
	return nil, apierr.Newf(apierr.Validation, "the chat does not answer %s", req.Method)
}

// SamplingMaxTokens bounds the tokens a server's sampling request may ask
// the model for (a larger or absent maxTokens gets this).
const SamplingMaxTokens = 4096

// sample answers a server's sampling request with the profile's model:
// one request of the turn at a time, its output bounded (SamplingMaxTokens
// and what is left of the turn's token budget), its usage counted against
// that budget and published as a usage event, so a server can neither fan
// out requests on the profile's key nor spend past its budget unseen.
func (t *turn) sample(ctx context.Context, p mcp.CreateMessageParams) (any, error) {
	if err := t.sampling.enter(ctx); err != nil {
		return nil, err
	}
	defer t.sampling.leave()
	limit := int64(SamplingMaxTokens)
	if p.MaxTokens > 0 {
		limit = min(limit, p.MaxTokens)
	}
	steps := t.state()
	if budget := t.profile.MaxTokensPerTurn; budget > 0 {
		left := budget - steps.tokens - t.sampled.Load()
		if left <= 0 {
			return nil, apierr.Newf(apierr.RateLimited, "this turn has spent its token budget (%d tokens, chat profile %s): no sampling", budget, t.profile.Name)
		}
		limit = min(limit, left)
	}
	{
		preq := provider.Request{System: p.SystemPrompt, MaxTokens: int(limit)}
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
		u := &model.ChatUsage{Step: steps.steps, InputTokens: step.Usage.InputTokens, OutputTokens: step.Usage.OutputTokens, Sampling: true}
		t.sampled.Add(u.InputTokens + u.OutputTokens)
		if pr := t.profile.Prices; pr != nil {
			c := pr.Cost(u.InputTokens, u.OutputTokens)
			u.Cost, u.Currency = &c, pr.Currency
		}
		t.publish(model.ChatEvent{Kind: model.ChatEventUsage, Usage: u})
		stop := "endTurn"
		if step.StopReason == provider.StopMaxTokens {
			stop = "maxTokens"
		}
		return &mcp.CreateMessageResult{Model: t.profile.Model, Role: "assistant",
			Content: &mcp.TextContent{Text: strings.TrimSpace(step.Text)}, StopReason: stop}, nil
	}
}

// gate admits one holder at a time; a waiter gives up with its context.
type gate struct {
	once sync.Once
	ch   chan struct{}
}

func (g *gate) enter(ctx context.Context) error {
	g.once.Do(func() { g.ch = make(chan struct{}, 1) })
	select {
	case g.ch <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gate) leave() { <-g.ch }

// elicit puts a server's form to the conversation's user: an
// input_requested event, a pending input (Deps.Inputs) and the user's
// answer, or cancel when nobody answers in time (an input_answered event
// says which). A turn without a user channel (no_input), a URL-mode
// request and a schema outside the form subset are declined, with an
// input_answered event giving the reason.
func (t *turn) elicit(ctx context.Context, c StepCall, req model.ClientRequest) (any, error) {
	var p mcp.ElicitParams
	if err := json.Unmarshal(req.Params, &p); err != nil {
		return nil, apierr.Invalid("params", "elicitation params: "+err.Error())
	}
	in := model.ChatInput{InputID: uuid.NewString(), CallID: c.ID, Tool: c.Name, Server: req.Server, Message: p.Message,
		AskedAt: t.e.d.Now().UTC()}
	decline := func(reason string) (any, error) {
		in.Action, in.Reason = model.InputDecline, reason
		t.publish(model.ChatEvent{Kind: model.ChatEventInputAnswered, Input: &in})
		return &mcp.ElicitResult{Action: model.InputDecline}, nil
	}
	switch {
	case t.noInput || t.e.d.Inputs == nil:
		return decline("this conversation has no user to ask (its messages come from /v1/chat/completions), so the server's request for input was declined")
	case p.Mode == "url" || p.URL != "":
		return decline("the server asked the user to open a URL (URL-mode elicitation), which the chat does not support, so it was declined")
	}
	schema, err := json.Marshal(p.RequestedSchema)
	if err != nil {
		return nil, apierr.Invalid("params", "elicitation schema: "+err.Error())
	}
	if _, err := elicitform.Parse(schema); err != nil {
		return decline("the server's form is outside what the chat can show (" + err.Error() + "), so it was declined")
	}
	if string(schema) == "null" {
		schema = json.RawMessage(`{"type":"object","properties":{}}`)
	}
	in.RequestedSchema = schema
	// The call's time limit stops while the user reads and answers (libs/client
	// pauses it): the input timeout bounds that wait.
	got, content, err := t.e.d.Inputs.AskInput(ctx, t.conv, in, func(asked model.ChatInput) {
		t.publish(model.ChatEvent{Kind: model.ChatEventInputRequested, Input: &asked})
	})
	if err != nil {
		// The clients showing the form hear that it is gone.
		in.Action, in.Reason = model.InputCancel, "the tool call ended before an answer"
		if ctx.Err() == nil {
			in.Reason = "asking the user failed: " + apierr.From(err).Message
		}
		t.publish(model.ChatEvent{Kind: model.ChatEventInputAnswered, Input: &in})
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	t.publish(model.ChatEvent{Kind: model.ChatEventInputAnswered, Input: &got})
	return &mcp.ElicitResult{Action: got.Action, Content: content}, nil
}
