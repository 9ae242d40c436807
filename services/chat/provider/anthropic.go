package provider

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
)

// defaultMaxTokens is sent when Request.MaxTokens is 0: the Messages API
// requires max_tokens.
const defaultMaxTokens = 4096

// anthropicModel talks to the Anthropic Messages API.
type anthropicModel struct {
	cfg      Config
	messages anthropic.MessageService
}

func newAnthropic(cfg Config) *anthropicModel {
	opts := []option.RequestOption{
		// No ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL or profile from the
		// environment: the profile's settings are the only ones.
		option.WithoutEnvironmentDefaults(),
		option.WithHTTPClient(cfg.HTTPClient),
		option.WithMaxRetries(0),
	}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	return &anthropicModel{cfg: cfg, messages: anthropic.NewClient(opts...).Messages}
}

func (m *anthropicModel) Step(ctx context.Context, req Request, onDelta func(Delta)) (Step, error) {
	params, err := m.params(req)
	if err != nil {
		return Step{}, err
	}
	var step Step
	err = retry(ctx, m.cfg, "Anthropic API", func() (bool, error) {
		s, streamed, err := m.stream(ctx, params, onDelta)
		step = s
		return streamed, err
	}, anthropicStatus)
	return step, err
}

func anthropicStatus(err error) (httpError, bool) {
	var e *anthropic.Error
	if !errors.As(err, &e) {
		return httpError{}, false
	}
	he := httpError{status: e.StatusCode}
	if e.Response != nil {
		he.header = e.Response.Header
	}
	if he.status == 0 || he.status == http.StatusOK {
		// An `event: error` inside a 200 stream: its type says what happened.
		switch e.Type() {
		case "rate_limit_error":
			he.status = http.StatusTooManyRequests
		case "overloaded_error":
			he.status = 529
		default:
			he.status = http.StatusInternalServerError
		}
	}
	var body struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(e.RawJSON()), &body) == nil {
		he.message = body.Error.Message
	}
	he.contextFull = contextExceeded(he.status, "", he.message)
	return he, true
}

// stream runs one attempt, accumulating the message from its events.
func (m *anthropicModel) stream(ctx context.Context, params anthropic.MessageNewParams, onDelta func(Delta)) (Step, bool, error) {
	s := m.messages.NewStreaming(ctx, params)
	defer s.Close()
	var (
		msg      anthropic.Message
		streamed bool
		budget   replyBudget
	)
	for s.Next() {
		ev := s.Current()
		switch ev.Type {
		case "content_block_start":
			b := ev.ContentBlock
			if err := budget.add(len(b.ID) + len(b.Name) + len(b.Text)); err != nil {
				return Step{}, streamed, err
			}
			if b.Type == "tool_use" || b.Type == "server_tool_use" {
				if err := budget.call(); err != nil {
					return Step{}, streamed, err
				}
			}
		case "content_block_delta":
			d := ev.Delta
			if err := budget.add(len(d.Text) + len(d.PartialJSON) + len(d.Thinking)); err != nil {
				return Step{}, true, err
			}
		}
		if err := msg.Accumulate(ev); err != nil {
			return Step{}, streamed, err
		}
		if ev.Type == "content_block_delta" {
			streamed = true
			if ev.Delta.Type == "text_delta" && ev.Delta.Text != "" && onDelta != nil {
				onDelta(Delta{Text: ev.Delta.Text})
			}
		}
	}
	if err := s.Err(); err != nil {
		return Step{}, streamed, err
	}
	if msg.StopReason == "" {
		return Step{}, streamed, errCutShort
	}
	var step Step
	for _, b := range msg.Content {
		switch b.Type {
		case "text":
			step.Text += b.Text
		case "tool_use":
			args := string(b.Input)
			if args == "" {
				args = "{}"
			}
			step.ToolCalls = append(step.ToolCalls, ToolCall{ID: b.ID, Name: b.Name, Arguments: args})
		}
	}
	switch msg.StopReason {
	case anthropic.StopReasonEndTurn, anthropic.StopReasonStopSequence:
		step.StopReason = StopEndTurn
	case anthropic.StopReasonModelContextWindowExceeded:
		step.StopReason = StopMaxTokens // cut short, as by max_tokens
	default:
		step.StopReason = StopReason(msg.StopReason) // tool_use, max_tokens, refusal…
	}
	step.Usage = Usage{InputTokens: msg.Usage.InputTokens, OutputTokens: msg.Usage.OutputTokens}
	return step, streamed, nil
}

// params is the Messages request for req.
func (m *anthropicModel) params(req Request) (anthropic.MessageNewParams, error) {
	p := anthropic.MessageNewParams{
		Model:     anthropic.Model(m.cfg.Model),
		MaxTokens: defaultMaxTokens,
	}
	if req.MaxTokens > 0 {
		p.MaxTokens = int64(req.MaxTokens)
	}
	if req.System != "" {
		p.System = []anthropic.TextBlockParam{{Text: req.System}}
	}
	for _, msg := range req.Messages {
		switch msg.Role {
		case User:
			p.Messages = append(p.Messages, anthropic.NewUserMessage(anthropic.NewTextBlock(msg.Text)))
		case Assistant:
			var blocks []anthropic.ContentBlockParamUnion
			if msg.Text != "" {
				blocks = append(blocks, anthropic.NewTextBlock(msg.Text))
			}
			for _, c := range msg.ToolCalls {
				var input any = json.RawMessage(c.Arguments)
				if !json.Valid([]byte(c.Arguments)) {
					input = map[string]any{} // the API wants an object; the loop answered the bad call already
				}
				blocks = append(blocks, anthropic.NewToolUseBlock(c.ID, input, c.Name))
			}
			if len(blocks) == 0 {
				blocks = append(blocks, anthropic.NewTextBlock("(no answer)"))
			}
			p.Messages = append(p.Messages, anthropic.NewAssistantMessage(blocks...))
		case Tool:
			var blocks []anthropic.ContentBlockParamUnion
			for _, r := range msg.ToolResults {
				blocks = append(blocks, anthropic.NewToolResultBlock(r.CallID, r.Content, r.IsError))
			}
			p.Messages = append(p.Messages, anthropic.NewUserMessage(blocks...))
		default:
			return p, invalidRole(msg.Role)
		}
	}
	for _, t := range req.Tools {
		schema, err := schemaMap(t)
		if err != nil {
			return p, err
		}
		in := anthropic.ToolInputSchemaParam{ExtraFields: map[string]any{}}
		for k, v := range schema {
			switch k {
			case "type":
			case "properties":
				in.Properties = v
			case "required":
				if rs, ok := v.([]any); ok {
					for _, r := range rs {
						if s, ok := r.(string); ok {
							in.Required = append(in.Required, s)
						}
					}
				}
			default:
				in.ExtraFields[k] = v
			}
		}
		tool := anthropic.ToolParam{Name: t.Name, InputSchema: in}
		if t.Description != "" {
			tool.Description = anthropic.String(t.Description)
		}
		p.Tools = append(p.Tools, anthropic.ToolUnionParam{OfTool: &tool})
	}
	return p, nil
}
