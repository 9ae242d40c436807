package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/mcpbus/mcpbus/libs/apierr"
	openai "github.com/sashabaranov/go-openai"
)

// emptyToolResult stands for a tool result without text: go-openai omits an
// empty content, and the API requires one on a tool message.
const emptyToolResult = "(no output)"

// openaiModel talks to an OpenAI-compatible Chat Completions API.
type openaiModel struct {
	cfg Config
}

func newOpenAI(cfg Config) *openaiModel { return &openaiModel{cfg: cfg} }

// client is a go-openai client for one attempt, sending through d. Only cfg
// counts: go-openai reads no OPENAI_API_KEY or base URL from the environment
// and has no retries of its own (ours are in retry.go).
func (m *openaiModel) client(d *headerDoer) *openai.Client {
	c := openai.DefaultConfig(m.cfg.APIKey) // no Authorization header when the key is ""
	if m.cfg.BaseURL != "" {
		c.BaseURL = m.cfg.BaseURL
	}
	c.HTTPClient = d
	return openai.NewClientWithConfig(c)
}

func (m *openaiModel) Step(ctx context.Context, req Request, onDelta func(Delta)) (Step, error) {
	creq, err := m.request(req)
	if err != nil {
		return Step{}, err
	}
	var (
		step    Step
		header  http.Header // of the last attempt's response
		refused error       // go-openai refused the request before sending it
	)
	err = retry(ctx, m.cfg, "OpenAI-compatible API", func() (bool, error) {
		d := &headerDoer{client: m.cfg.HTTPClient}
		s, streamed, err := m.stream(ctx, m.client(d), creq, onDelta)
		step, header = s, d.header
		var ue *url.Error // a base URL that does not parse is not the model's fault
		if err != nil && !d.sent && ctx.Err() == nil && !errors.As(err, &ue) {
			refused = err
		}
		return streamed, err
	}, func(err error) (httpError, bool) {
		he, ok := openaiStatus(err)
		he.header = header
		return he, ok
	})
	if refused != nil {
		// The library's own checks of OpenAI's model names (e.g. tools with
		// a GPT-6 reasoning model need the Responses API).
		return Step{}, apierr.Invalid("model", fmt.Sprintf("model %q: %v", m.cfg.Model, refused))
	}
	return step, err
}

// request is the Chat Completions request for req.
func (m *openaiModel) request(req Request) (openai.ChatCompletionRequest, error) {
	r := openai.ChatCompletionRequest{
		Model:         m.cfg.Model,
		StreamOptions: &openai.StreamOptions{IncludeUsage: true},
	}
	if req.System != "" {
		r.Messages = append(r.Messages, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleSystem, Content: req.System})
	}
	for _, msg := range req.Messages {
		switch msg.Role {
		case User:
			r.Messages = append(r.Messages, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: msg.Text})
		case Assistant:
			a := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: msg.Text}
			for _, c := range msg.ToolCalls {
				a.ToolCalls = append(a.ToolCalls, openai.ToolCall{
					ID: c.ID, Type: openai.ToolTypeFunction,
					Function: openai.FunctionCall{Name: c.Name, Arguments: c.Arguments},
				})
			}
			r.Messages = append(r.Messages, a)
		case Tool:
			for _, res := range msg.ToolResults {
				content := res.Content
				if content == "" {
					content = emptyToolResult
					if res.IsError {
						content = "error"
					}
				}
				r.Messages = append(r.Messages, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, Content: content, ToolCallID: res.CallID})
			}
		default:
			return r, invalidRole(msg.Role)
		}
	}
	for _, t := range req.Tools {
		schema, err := schemaMap(t)
		if err != nil {
			return r, err
		}
		r.Tools = append(r.Tools, openai.Tool{
			Type:     openai.ToolTypeFunction,
			Function: &openai.FunctionDefinition{Name: t.Name, Description: t.Description, Parameters: schema},
		})
	}
	if req.MaxTokens > 0 {
		// OpenAI itself wants max_completion_tokens (reasoning models refuse
		// max_tokens); compatible servers know max_tokens best, except for
		// OpenAI's reasoning model names (o1…, gpt-5…), which go-openai
		// refuses with max_tokens and which such servers (OpenRouter, Azure)
		// take with max_completion_tokens.
		legacy := r
		//lint:ignore SA1019 compatible servers (Ollama, vLLM, LM Studio) know max_tokens best
		legacy.MaxTokens = req.MaxTokens
		r.MaxCompletionTokens = req.MaxTokens
		if m.cfg.BaseURL != "" && !errors.Is(openai.NewReasoningValidator().Validate(legacy), openai.ErrReasoningModelMaxTokensDeprecated) {
			r = legacy
		}
	}
	return r, nil
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
