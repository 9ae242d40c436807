package llmtest_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	aoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/mcpbus/mcpbus/services/chat/llmtest"
)

// The server is checked with the official SDKs as clients: they decode what
// it sends exactly as they decode the real APIs.

func openaiClient(srv *llmtest.Server, key string) *openai.Client {
	c := openai.NewClient(option.WithBaseURL(srv.OpenAIBaseURL()), option.WithAPIKey(key), option.WithMaxRetries(0))
	return &c
}

func anthropicClient(srv *llmtest.Server, key string) *anthropic.Client {
	c := anthropic.NewClient(aoption.WithoutEnvironmentDefaults(), aoption.WithBaseURL(srv.URL), aoption.WithAPIKey(key), aoption.WithMaxRetries(0))
	return &c
}

var calls = llmtest.ToolCalls(
	llmtest.ToolCall{ID: "c1", Name: "fs__read", Arguments: `{"path":"/tmp/a.txt"}`},
	llmtest.ToolCall{ID: "c2", Name: "web__fetch", Arguments: `{"url":"https://example.com","max":3}`},
)

func TestOpenAINonStreaming(t *testing.T) {
	srv := llmtest.Start(t, "k")
	srv.Enqueue(llmtest.Text("hello world"), calls)
	c := openaiClient(srv, "k")
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}

	r, err := c.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Choices[0].Message.Content; got != "hello world" || r.Choices[0].FinishReason != "stop" {
		t.Fatalf("content %q finish %q", got, r.Choices[0].FinishReason)
	}
	if r.Usage.PromptTokens != 11 || r.Usage.CompletionTokens != 7 || r.Model != "m" {
		t.Fatalf("usage %+v model %q", r.Usage, r.Model)
	}
	r, err = c.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	tc := r.Choices[0].Message.ToolCalls
	if len(tc) != 2 || tc[0].ID != "c1" || tc[0].Function.Name != "fs__read" || tc[0].Function.Arguments != `{"path":"/tmp/a.txt"}` ||
		tc[1].ID != "c2" || tc[1].Function.Arguments != `{"url":"https://example.com","max":3}` || r.Choices[0].FinishReason != "tool_calls" {
		t.Fatalf("tool calls %+v", r.Choices[0])
	}
	if srv.Attempts() != 2 || srv.Last().API != "openai" || srv.Last().JSON()["model"] != "m" {
		t.Fatalf("recorded %d %+v", srv.Attempts(), srv.Last())
	}
}

func TestOpenAIStreaming(t *testing.T) {
	srv := llmtest.Start(t, "")
	srv.Enqueue(calls)
	c := openaiClient(srv, "")
	s := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	args := map[int64]string{}
	chunks, usage := 0, int64(0)
	for s.Next() {
		ch := s.Current()
		chunks++
		for _, choice := range ch.Choices {
			for _, d := range choice.Delta.ToolCalls {
				args[d.Index] += d.Function.Arguments
			}
		}
		if len(ch.Choices) == 0 {
			usage = ch.Usage.TotalTokens
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if args[0] != `{"path":"/tmp/a.txt"}` || args[1] != `{"url":"https://example.com","max":3}` {
		t.Fatalf("args %v", args)
	}
	if chunks < 8 || usage != 18 {
		t.Fatalf("chunks %d usage %d: want arguments split over chunks and usage last", chunks, usage)
	}
}

func TestAnthropicNonStreaming(t *testing.T) {
	srv := llmtest.Start(t, "k")
	r := calls
	r.Text = "Let me look."
	srv.Enqueue(r)
	m, err := anthropicClient(srv, "k").Messages.New(context.Background(), anthropic.MessageNewParams{
		Model: "claude", MaxTokens: 100, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Content) != 3 || m.Content[0].Text != "Let me look." || m.Content[1].Type != "tool_use" ||
		m.Content[1].ID != "c1" || string(m.Content[1].Input) != `{"path":"/tmp/a.txt"}` || m.Content[2].Name != "web__fetch" {
		t.Fatalf("content %+v", m.Content)
	}
	if m.StopReason != "tool_use" || m.Usage.InputTokens != 11 || m.Usage.OutputTokens != 7 {
		t.Fatalf("stop %q usage %+v", m.StopReason, m.Usage)
	}
}

func TestAnthropicStreamingAccumulates(t *testing.T) {
	srv := llmtest.Start(t, "k")
	r := calls
	r.Text = "Two calls."
	srv.Enqueue(r)
	s := anthropicClient(srv, "k").Messages.NewStreaming(context.Background(), anthropic.MessageNewParams{
		Model: "claude", MaxTokens: 100, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
	})
	var m anthropic.Message
	for s.Next() {
		if err := m.Accumulate(s.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if len(m.Content) != 3 || m.Content[0].Text != "Two calls." || string(m.Content[2].Input) != `{"url":"https://example.com","max":3}` {
		t.Fatalf("content %+v", m.Content)
	}
	if m.StopReason != "tool_use" || m.Usage.InputTokens != 11 || m.Usage.OutputTokens != 7 {
		t.Fatalf("stop %q usage %+v", m.StopReason, m.Usage)
	}
}

func TestErrorsAndAuth(t *testing.T) {
	srv := llmtest.Start(t, "right")
	srv.Enqueue(llmtest.RateLimited("7"))
	_, err := openaiClient(srv, "wrong").Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "m"})
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.StatusCode != http.StatusUnauthorized || oe.Code != "invalid_api_key" {
		t.Fatalf("wrong key: %v", err)
	}
	if srv.Pending() != 1 {
		t.Fatal("a rejected request consumed a reply")
	}
	_, err = openaiClient(srv, "right").Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "m"})
	if !errors.As(err, &oe) || oe.StatusCode != 429 || oe.Response.Header.Get("Retry-After") != "7" || oe.Code != "rate_limit_exceeded" {
		t.Fatalf("429: %v", err)
	}
	// Empty queue: 500 saying so.
	_, err = anthropicClient(srv, "right").Messages.New(context.Background(), anthropic.MessageNewParams{Model: "m", MaxTokens: 1})
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != 500 {
		t.Fatalf("empty queue: %v", err)
	}
	if srv.Attempts() != 3 {
		t.Fatalf("attempts %d", srv.Attempts())
	}
}

func TestMalformed(t *testing.T) {
	srv := llmtest.Start(t, "")
	srv.Enqueue(llmtest.Malformed(), llmtest.Malformed())
	if _, err := openaiClient(srv, "").Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "m"}); err == nil {
		t.Fatal("malformed body decoded")
	}
	s := anthropicClient(srv, "").Messages.NewStreaming(context.Background(), anthropic.MessageNewParams{Model: "m", MaxTokens: 1})
	for s.Next() {
	}
	if s.Err() == nil {
		t.Fatal("malformed stream decoded")
	}
}
