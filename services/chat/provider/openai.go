package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/shared"
)

// openaiModel talks to an OpenAI-compatible Chat Completions API.
type openaiModel struct {
	cfg  Config
	chat openai.ChatCompletionService
}

func newOpenAI(cfg Config) *openaiModel {
	// The service, not openai.NewClient: the client would read OPENAI_API_KEY
	// and OPENAI_BASE_URL from the environment and could send a real key to
	// a local server.
	opts := []option.RequestOption{
		option.WithEnvironmentProduction(),
		option.WithHTTPClient(cfg.HTTPClient),
		option.WithMaxRetries(0),
	}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	return &openaiModel{cfg: cfg, chat: openai.NewChatCompletionService(opts...)}
}

func (m *openaiModel) Step(ctx context.Context, req Request, onDelta func(Delta)) (Step, error) {
	params, err := m.params(req)
	if err != nil {
		return Step{}, err
	}
	var step Step
	err = retry(ctx, m.cfg, "OpenAI-compatible API", func() (bool, error) {
		s, streamed, err := m.stream(ctx, params, onDelta)
		step = s
		return streamed, err
	}, openaiStatus)
	return step, err
}

func openaiStatus(err error) (httpError, bool) {
	var se *ssestream.StreamError
	if errors.As(err, &se) {
		// An error event inside a 200 stream: {"error":{"type","code","message"}}.
		var body struct {
			Error struct {
				Type    string `json:"type"`
				Code    any    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		_ = json.Unmarshal(se.Event.Data, &body)
		he := httpError{status: http.StatusInternalServerError, message: body.Error.Message}
		if strings.Contains(body.Error.Type+fmt.Sprint(body.Error.Code), "rate_limit") {
			he.status = http.StatusTooManyRequests
		}
		return he, true
	}
	var e *openai.Error
	if !errors.As(err, &e) {
		return httpError{}, false
	}
	he := httpError{status: e.StatusCode, message: e.Message}
	if e.Response != nil {
		he.header = e.Response.Header
	}
	return he, true
}

// stream runs one attempt, accumulating text and tool call deltas.
func (m *openaiModel) stream(ctx context.Context, params openai.ChatCompletionNewParams, onDelta func(Delta)) (Step, bool, error) {
	s := m.chat.NewStreaming(ctx, params)
	defer s.Close()
	var (
		step     Step
		text     []byte
		streamed bool
		calls    []ToolCall
		slot     = map[int64]int{} // delta index → calls index
		finish   string
	)
	for s.Next() {
		chunk := s.Current()
		if chunk.Usage.PromptTokens != 0 || chunk.Usage.CompletionTokens != 0 {
			step.Usage = Usage{InputTokens: chunk.Usage.PromptTokens, OutputTokens: chunk.Usage.CompletionTokens}
		}
		for _, choice := range chunk.Choices {
			if choice.Index != 0 {
				continue
			}
			if d := choice.Delta.Content; d != "" {
				streamed = true
				text = append(text, d...)
				if onDelta != nil {
					onDelta(Delta{Text: d})
				}
			}
			for _, tc := range choice.Delta.ToolCalls {
				i, ok := slot[tc.Index]
				// Some servers number every call 0: a new id is a new call.
				if !ok || (tc.ID != "" && calls[i].ID != "" && tc.ID != calls[i].ID) {
					calls = append(calls, ToolCall{})
					i = len(calls) - 1
					slot[tc.Index] = i
				}
				streamed = true
				c := &calls[i]
				if tc.ID != "" {
					c.ID = tc.ID
				}
				if c.Name == "" {
					c.Name = tc.Function.Name
				}
				c.Arguments += tc.Function.Arguments
			}
			if choice.FinishReason != "" {
				finish = choice.FinishReason
			}
		}
	}
	if err := s.Err(); err != nil {
		return Step{}, streamed, err
	}
	for i := range calls {
		if calls[i].Arguments == "" {
			calls[i].Arguments = "{}"
		}
	}
	step.Text = string(text)
	step.ToolCalls = calls
	switch finish {
	case "stop":
		step.StopReason = StopEndTurn
	case "tool_calls", "function_call":
		step.StopReason = StopToolUse
	case "length":
		step.StopReason = StopMaxTokens
	case "content_filter":
		step.StopReason = StopRefusal
	default:
		step.StopReason = StopReason(finish)
	}
	return step, streamed, nil
}

// params is the Chat Completions request for req.
func (m *openaiModel) params(req Request) (openai.ChatCompletionNewParams, error) {
	p := openai.ChatCompletionNewParams{
		Model:         shared.ChatModel(m.cfg.Model),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	if req.MaxTokens > 0 {
		// OpenAI itself wants max_completion_tokens (reasoning models refuse
		// max_tokens); compatible servers know max_tokens best.
		if m.cfg.BaseURL == "" {
			p.MaxCompletionTokens = openai.Int(int64(req.MaxTokens))
		} else {
			p.MaxTokens = openai.Int(int64(req.MaxTokens))
		}
	}
	if req.System != "" {
		p.Messages = append(p.Messages, openai.SystemMessage(req.System))
	}
	for _, msg := range req.Messages {
		switch msg.Role {
		case User:
			p.Messages = append(p.Messages, openai.UserMessage(msg.Text))
		case Assistant:
			a := openai.ChatCompletionAssistantMessageParam{}
			if msg.Text != "" {
				a.Content.OfString = openai.String(msg.Text)
			}
			for _, c := range msg.ToolCalls {
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID:       c.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: c.Name, Arguments: c.Arguments},
					},
				})
			}
			p.Messages = append(p.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		case Tool:
			for _, r := range msg.ToolResults {
				content := r.Content
				if r.IsError && content == "" {
					content = "error"
				}
				p.Messages = append(p.Messages, openai.ToolMessage(content, r.CallID))
			}
		default:
			return p, invalidRole(msg.Role)
		}
	}
	for _, t := range req.Tools {
		schema, err := schemaMap(t)
		if err != nil {
			return p, err
		}
		fn := shared.FunctionDefinitionParam{Name: t.Name, Parameters: schema}
		if t.Description != "" {
			fn.Description = openai.String(t.Description)
		}
		p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(fn))
	}
	return p, nil
}

// schemaMap decodes a tool's input schema ({"type":"object"} when empty).
func schemaMap(t ToolSpec) (map[string]any, error) {
	if len(t.InputSchema) == 0 {
		return map[string]any{"type": "object", "properties": map[string]any{}}, nil
	}
	var m map[string]any
	if err := json.Unmarshal(t.InputSchema, &m); err != nil || m == nil {
		return nil, invalidSchema(t.Name, err)
	}
	return m, nil
}
