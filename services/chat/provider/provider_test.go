package provider_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
	"github.com/mcpbus/mcpbus/services/chat/provider"
)

const key = "sk-test"

// backends runs f against a fresh llmtest server for each provider.
func backends(t *testing.T, f func(t *testing.T, srv *llmtest.Server, m provider.Model, name string)) {
	for _, name := range []string{provider.OpenAI, provider.Anthropic} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := llmtest.Start(t, key)
			f(t, srv, newModel(t, srv, name), name)
		})
	}
}

func newModel(t *testing.T, srv *llmtest.Server, name string) provider.Model {
	t.Helper()
	base := srv.URL
	if name == provider.OpenAI {
		base = srv.OpenAIBaseURL()
	}
	m, err := provider.New(provider.Config{Provider: name, Model: "test-model", BaseURL: base, APIKey: key})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

var hello = provider.Request{
	System:   "You are terse.",
	Messages: []provider.Message{{Role: provider.User, Text: "Say hello."}},
}

func TestPlainAnswerStreamed(t *testing.T) {
	backends(t, func(t *testing.T, srv *llmtest.Server, m provider.Model, name string) {
		srv.Enqueue(llmtest.Reply{Text: "Hello there, how are you?", Usage: &llmtest.Usage{InputTokens: 42, OutputTokens: 9}})
		var deltas []string
		step, err := m.Step(context.Background(), hello, func(d provider.Delta) { deltas = append(deltas, d.Text) })
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"Hello ", "there, ", "how ", "are ", "you?"}
		if !reflect.DeepEqual(deltas, want) {
			t.Fatalf("deltas %q, want %q", deltas, want)
		}
		if step.Text != "Hello there, how are you?" || step.StopReason != provider.StopEndTurn || len(step.ToolCalls) != 0 {
			t.Fatalf("step %+v", step)
		}
		if step.Usage != (provider.Usage{InputTokens: 42, OutputTokens: 9}) {
			t.Fatalf("usage %+v", step.Usage)
		}
		req := srv.Last()
		body := req.JSON()
		if body["model"] != "test-model" || body["stream"] != true {
			t.Fatalf("request %s", req.Body)
		}
		switch name {
		case provider.OpenAI:
			if req.Header.Get("Authorization") != "Bearer "+key {
				t.Fatalf("auth header %q", req.Header.Get("Authorization"))
			}
			if !jsonEq(body["stream_options"], `{"include_usage":true}`) ||
				!jsonEq(body["messages"], `[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hello."}]`) {
				t.Fatalf("request %s", req.Body)
			}
		case provider.Anthropic:
			if req.Header.Get("X-Api-Key") != key || body["max_tokens"] != float64(4096) {
				t.Fatalf("request %s %v", req.Body, req.Header)
			}
			if !jsonEq(body["system"], `[{"type":"text","text":"You are terse."}]`) ||
				!jsonEq(body["messages"], `[{"role":"user","content":[{"type":"text","text":"Say hello."}]}]`) {
				t.Fatalf("request %s", req.Body)
			}
		}
	})
}

func TestToolCalls(t *testing.T) {
	one := []llmtest.ToolCall{{ID: "call_1", Name: "fs__read_file", Arguments: `{"path":"/etc/hosts"}`}}
	two := []llmtest.ToolCall{
		{ID: "call_a", Name: "fs__read_file", Arguments: `{"path":"/a"}`},
		{ID: "call_b", Name: "time__now", Arguments: `{"zone":"Europe/Paris","format":"rfc3339"}`},
	}
	for _, calls := range [][]llmtest.ToolCall{one, two} {
		backends(t, func(t *testing.T, srv *llmtest.Server, m provider.Model, name string) {
			r := llmtest.ToolCalls(calls...)
			r.Text = "Checking."
			srv.Enqueue(r)
			step, err := m.Step(context.Background(), hello, nil)
			if err != nil {
				t.Fatal(err)
			}
			if step.Text != "Checking." || step.StopReason != provider.StopToolUse || len(step.ToolCalls) != len(calls) {
				t.Fatalf("step %+v", step)
			}
			for i, c := range calls {
				got := step.ToolCalls[i]
				if got != (provider.ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments}) {
					t.Errorf("call %d = %+v, want %+v", i, got, c)
				}
			}
		})
	}
}

func TestToolsAndResultsSent(t *testing.T) {
	req := provider.Request{
		System: "sys",
		Messages: []provider.Message{
			{Role: provider.User, Text: "Read /a and the time."},
			{Role: provider.Assistant, Text: "Checking.", ToolCalls: []provider.ToolCall{
				{ID: "call_a", Name: "fs__read_file", Arguments: `{"path":"/a"}`},
				{ID: "call_b", Name: "time__now", Arguments: `{}`},
			}},
			{Role: provider.Tool, ToolResults: []provider.ToolResult{
				{CallID: "call_a", Content: "contents of a"},
				{CallID: "call_b", Content: "Tool call timed out after 30s", IsError: true},
			}},
		},
		Tools: []provider.ToolSpec{{
			Name: "fs__read_file", Description: "Read a file",
			InputSchema: []byte(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"],"additionalProperties":false}`),
		}, {Name: "time__now"}},
		MaxTokens: 500,
	}
	backends(t, func(t *testing.T, srv *llmtest.Server, m provider.Model, name string) {
		srv.Enqueue(llmtest.Text("a says hi; the clock timed out"))
		if _, err := m.Step(context.Background(), req, nil); err != nil {
			t.Fatal(err)
		}
		body := srv.Last().JSON()
		switch name {
		case provider.OpenAI:
			want := `[
			 {"role":"system","content":"sys"},
			 {"role":"user","content":"Read /a and the time."},
			 {"role":"assistant","content":"Checking.","tool_calls":[
			   {"id":"call_a","type":"function","function":{"name":"fs__read_file","arguments":"{\"path\":\"/a\"}"}},
			   {"id":"call_b","type":"function","function":{"name":"time__now","arguments":"{}"}}]},
			 {"role":"tool","tool_call_id":"call_a","content":"contents of a"},
			 {"role":"tool","tool_call_id":"call_b","content":"Tool call timed out after 30s"}]`
			if !jsonEq(body["messages"], want) {
				t.Errorf("messages %s", js(body["messages"]))
			}
			wantTools := `[
			 {"type":"function","function":{"name":"fs__read_file","description":"Read a file","parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"],"additionalProperties":false}}},
			 {"type":"function","function":{"name":"time__now","parameters":{"type":"object","properties":{}}}}]`
			if !jsonEq(body["tools"], wantTools) {
				t.Errorf("tools %s", js(body["tools"]))
			}
			if body["max_tokens"] != float64(500) {
				t.Errorf("max_tokens %v", body["max_tokens"])
			}
		case provider.Anthropic:
			want := `[
			 {"role":"user","content":[{"type":"text","text":"Read /a and the time."}]},
			 {"role":"assistant","content":[{"type":"text","text":"Checking."},
			   {"type":"tool_use","id":"call_a","name":"fs__read_file","input":{"path":"/a"}},
			   {"type":"tool_use","id":"call_b","name":"time__now","input":{}}]},
			 {"role":"user","content":[
			   {"type":"tool_result","tool_use_id":"call_a","content":[{"type":"text","text":"contents of a"}],"is_error":false},
			   {"type":"tool_result","tool_use_id":"call_b","content":[{"type":"text","text":"Tool call timed out after 30s"}],"is_error":true}]}]`
			if !jsonEq(body["messages"], want) {
				t.Errorf("messages %s", js(body["messages"]))
			}
			wantTools := `[
			 {"name":"fs__read_file","description":"Read a file","input_schema":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"],"additionalProperties":false}},
			 {"name":"time__now","input_schema":{"type":"object","properties":{}}}]`
			if !jsonEq(body["tools"], wantTools) {
				t.Errorf("tools %s", js(body["tools"]))
			}
			if body["max_tokens"] != float64(500) {
				t.Errorf("max_tokens %v", body["max_tokens"])
			}
		}
	})
}

func TestRateLimitRetryAfter(t *testing.T) {
	backends(t, func(t *testing.T, srv *llmtest.Server, m provider.Model, name string) {
		srv.Enqueue(llmtest.RateLimited("1"), llmtest.Text("ok"))
		start := time.Now()
		var notices []*apierr.Error
		var waits []int
		ctx := provider.WithRetryNotice(context.Background(), func(e *apierr.Error, wait int) {
			notices, waits = append(notices, e), append(waits, wait)
		})
		step, err := m.Step(ctx, hello, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(notices) != 1 || notices[0].Code != apierr.RateLimited || notices[0].Message != "Rate limited. Try again in 1 second." {
			t.Errorf("retry notices = %+v, want one RATE_LIMITED 'Rate limited. Try again in 1 second.'", notices)
		}
		if len(waits) != 1 || waits[0] != 1 {
			t.Errorf("retry waits = %v, want [1] (Retry-After)", waits)
		}
		if step.Text != "ok" || srv.Attempts() != 2 {
			t.Fatalf("text %q attempts %d", step.Text, srv.Attempts())
		}
		if el := time.Since(start); el < time.Second {
			t.Fatalf("retried after %v, want ≥ 1s (Retry-After)", el)
		}
	})
}

func TestRateLimitedForever(t *testing.T) {
	backends(t, func(t *testing.T, srv *llmtest.Server, m provider.Model, name string) {
		srv.Always(llmtest.RateLimited(""))
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := m.Step(ctx, hello, nil)
		// Waits 1 s, retries, then a 2 s wait does not fit in the context.
		e := apierr.From(err)
		if e.Code != apierr.RateLimited || e.Message != "Rate limited. Try again in 2 seconds." {
			t.Fatalf("err %v", err)
		}
		if srv.Attempts() != 2 {
			t.Fatalf("attempts %d, want 2 (backoff 1 s, then give up)", srv.Attempts())
		}
		if el := time.Since(start); el < time.Second || el > 1400*time.Millisecond {
			t.Fatalf("gave up after %v", el)
		}
	})
}

func TestRetriesBounded(t *testing.T) {
	srv := llmtest.Start(t, "")
	srv.Always(llmtest.RateLimited("0"))
	m, err := provider.New(provider.Config{Provider: provider.OpenAI, Model: "m", BaseURL: srv.OpenAIBaseURL(), MaxRetries: 3})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Step(context.Background(), hello, nil)
	if apierr.Of(err) != apierr.RateLimited || srv.Attempts() != 4 {
		t.Fatalf("err %v attempts %d, want RATE_LIMITED after 4", err, srv.Attempts())
	}
}

func TestServerError(t *testing.T) {
	backends(t, func(t *testing.T, srv *llmtest.Server, m provider.Model, name string) {
		srv.Enqueue(llmtest.Reply{Status: 500, Message: "boom"})
		_, err := m.Step(context.Background(), hello, nil)
		e := apierr.From(err)
		if e.Code != apierr.ServiceUnavailable || !strings.Contains(e.Message, "500") || !strings.Contains(e.Message, "boom") {
			t.Fatalf("err %v", err)
		}
		if srv.Attempts() != 1 {
			t.Fatalf("attempts %d: a 500 is not retried", srv.Attempts())
		}
	})
}

func TestMalformedReply(t *testing.T) {
	backends(t, func(t *testing.T, srv *llmtest.Server, m provider.Model, name string) {
		srv.Enqueue(llmtest.Malformed())
		_, err := m.Step(context.Background(), hello, nil)
		e := apierr.From(err)
		if e.Code != apierr.Internal || !strings.Contains(e.Message, "malformed reply") {
			t.Fatalf("err %v", err)
		}
	})
}

// TestStreamCutShort: a stream whose body ends cleanly before the answer's
// end (no finish_reason or [DONE]; no message_stop) is a failed step, not
// a final answer of the text so far.
func TestStreamCutShort(t *testing.T) {
	backends(t, func(t *testing.T, srv *llmtest.Server, m provider.Model, name string) {
		srv.Enqueue(llmtest.CutShort("The answer is"))
		step, err := m.Step(context.Background(), hello, nil)
		e := apierr.From(err)
		if err == nil || e.Code != apierr.Network || !strings.Contains(e.Message, "ended before the answer") {
			t.Fatalf("step %+v, err %v", step, err)
		}
		if srv.Attempts() != 1 {
			t.Fatalf("attempts %d: text was streamed, no retry", srv.Attempts())
		}
	})
}

func TestWrongAPIKey(t *testing.T) {
	backends(t, func(t *testing.T, srv *llmtest.Server, _ provider.Model, name string) {
		base := srv.URL
		if name == provider.OpenAI {
			base = srv.OpenAIBaseURL()
		}
		m, err := provider.New(provider.Config{Provider: name, Model: "m", BaseURL: base, APIKey: "wrong"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Step(context.Background(), hello, nil); apierr.Of(err) != apierr.Unauthorized {
			t.Fatalf("err %v", err)
		}
	})
}

func TestNetworkUnavailable(t *testing.T) {
	srv := llmtest.New("")
	url := srv.URL
	srv.Close()
	for _, name := range []string{provider.OpenAI, provider.Anthropic} {
		m, err := provider.New(provider.Config{Provider: name, Model: "m", BaseURL: url})
		if err != nil {
			t.Fatal(err)
		}
		_, err = m.Step(context.Background(), hello, nil)
		e := apierr.From(err)
		if e.Code != apierr.Network || !strings.Contains(e.Message, "unavailable") {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

func TestSlowStreamCancelled(t *testing.T) {
	backends(t, func(t *testing.T, srv *llmtest.Server, m provider.Model, name string) {
		srv.Enqueue(llmtest.Slow(llmtest.Text("one two three four five"), 100*time.Millisecond))
		ctx, cancel := context.WithCancel(context.Background())
		var got []string
		_, err := m.Step(ctx, hello, func(d provider.Delta) {
			got = append(got, d.Text)
			if len(got) == 2 {
				cancel()
			}
		})
		if !errors.Is(err, context.Canceled) || len(got) != 2 {
			t.Fatalf("err %v after %q", err, got)
		}
	})
}

func TestTextToolCallFromServer(t *testing.T) {
	backends(t, func(t *testing.T, srv *llmtest.Server, m provider.Model, name string) {
		srv.Enqueue(llmtest.TaggedToolCall("fs__read_file", `{"path": "/a"}`))
		step, err := m.Step(context.Background(), hello, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(step.ToolCalls) != 0 {
			t.Fatalf("structured calls %+v", step.ToolCalls)
		}
		c, ok := provider.TextToolCall(step.Text)
		if !ok || c.Name != "fs__read_file" || c.Arguments != `{"path": "/a"}` {
			t.Fatalf("text %q: %+v %v", step.Text, c, ok)
		}
	})
}

func TestNewValidation(t *testing.T) {
	for _, tc := range []struct {
		cfg   provider.Config
		field string
	}{
		{provider.Config{Provider: "openai", Model: "gpt"}, "api_key"},
		{provider.Config{Provider: "anthropic", Model: "claude"}, "api_key"},
		{provider.Config{Provider: "openai", APIKey: "k"}, "model"},
		{provider.Config{Provider: "gemini", Model: "x", APIKey: "k"}, "provider"},
	} {
		_, err := provider.New(tc.cfg)
		e := apierr.From(err)
		if e.Code != apierr.Validation || e.Field != tc.field {
			t.Errorf("%+v: %v", tc.cfg, err)
		}
	}
	// A local server needs no key.
	if _, err := provider.New(provider.Config{Provider: "openai", Model: "llama3", BaseURL: "http://localhost:11434/v1"}); err != nil {
		t.Fatal(err)
	}
}

// TestNoKeyFromEnvironment: the SDKs read OPENAI_API_KEY / ANTHROPIC_API_KEY
// by default; a profile without a key must not send one to its base URL.
func TestNoKeyFromEnvironment(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-leak")
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-leak")
	srv := llmtest.Start(t, "")
	srv.Enqueue(llmtest.Text("a"), llmtest.Text("b"))
	for _, name := range []string{provider.OpenAI, provider.Anthropic} {
		base := srv.URL
		if name == provider.OpenAI {
			base = srv.OpenAIBaseURL()
		}
		m, err := provider.New(provider.Config{Provider: name, Model: "m", BaseURL: base})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Step(context.Background(), hello, nil); err != nil {
			t.Fatal(err)
		}
		h := srv.Last().Header
		if strings.Contains(h.Get("Authorization")+h.Get("X-Api-Key"), "leak") {
			t.Fatalf("%s sent the environment's key: %v", name, h)
		}
	}
}

func jsonEq(got any, want string) bool {
	var w any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		panic(err)
	}
	return reflect.DeepEqual(got, w)
}

func js(v any) string { b, _ := json.Marshal(v); return string(b) }

func TestErrorInsideStream(t *testing.T) {
	backends(t, func(t *testing.T, srv *llmtest.Server, m provider.Model, name string) {
		// Overload / rate limit reported as an error event of a 200 stream:
		// retried like a 429.
		typ := map[string]string{provider.OpenAI: "rate_limit_exceeded", provider.Anthropic: "overloaded_error"}[name]
		srv.Enqueue(llmtest.Reply{StreamError: typ, Message: "busy"}, llmtest.Text("ok"))
		step, err := m.Step(context.Background(), hello, nil)
		if err != nil || step.Text != "ok" || srv.Attempts() != 2 {
			t.Fatalf("err %v step %+v attempts %d", err, step, srv.Attempts())
		}
		// Any other error event: SERVICE_UNAVAILABLE with its message, not retried.
		srv.Enqueue(llmtest.Reply{StreamError: "server_error", Message: "exploded"})
		_, err = m.Step(context.Background(), hello, nil)
		e := apierr.From(err)
		if e.Code != apierr.ServiceUnavailable || !strings.Contains(e.Message, "exploded") || srv.Attempts() != 3 {
			t.Fatalf("err %v attempts %d", err, srv.Attempts())
		}
	})
}

// A conversation past the model's context window is refused with a 400 the
// chat recognizes (OpenAI's context_length_exceeded, Anthropic's "prompt is
// too long"): VALIDATION_ERROR with field context_length saying to start a
// new conversation, not the provider's bare 400.
func TestContextWindowExceeded(t *testing.T) {
	replies := map[string]llmtest.Reply{
		provider.OpenAI: {Status: 400, Code: "context_length_exceeded",
			Message: "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens. Please reduce the length of the messages."},
		provider.Anthropic: {Status: 400, Message: "prompt is too long: 210000 tokens > 200000 maximum"},
	}
	backends(t, func(t *testing.T, srv *llmtest.Server, m provider.Model, name string) {
		srv.Enqueue(replies[name])
		_, err := m.Step(context.Background(), hello, nil)
		e := apierr.From(err)
		if e.Code != apierr.Validation || e.Field != model.ChatContextField || !strings.Contains(e.Message, "start a new conversation") ||
			!strings.Contains(e.Message, "maximum") {
			t.Fatalf("err %v (field %q)", err, e.Field)
		}
		// Any other 400 stays the provider's refusal.
		srv.Enqueue(llmtest.Reply{Status: 400, Message: "bad temperature"})
		_, err = m.Step(context.Background(), hello, nil)
		if e := apierr.From(err); e.Code != apierr.Validation || e.Field != "" {
			t.Fatalf("a plain 400: %v (field %q)", err, e.Field)
		}
	})
}
