package provider_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
	"github.com/mcpbus/mcpbus/services/chat/provider"
	openai "github.com/sashabaranov/go-openai"
)

// TestRetryAfterHeaderHonoured: the wait comes from the 429's Retry-After
// (3 s, longer than the first backoff of 1 s), so a context of 1.5 s gives up
// at once instead of retrying after 1 s. go-openai's errors carry no headers:
// this proves the provider keeps them.
func TestRetryAfterHeaderHonoured(t *testing.T) {
	backends(t, func(t *testing.T, srv *llmtest.Server, m provider.Model, name string) {
		srv.Always(llmtest.RateLimited("3"))
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := m.Step(ctx, hello, nil)
		e := apierr.From(err)
		if e.Code != apierr.RateLimited || e.Message != "Rate limited. Try again in 3 seconds." {
			t.Fatalf("err %v, want RATE_LIMITED 'Try again in 3 seconds.'", err)
		}
		if srv.Attempts() != 1 || time.Since(start) > time.Second {
			t.Fatalf("attempts %d after %v, want 1 and no wait", srv.Attempts(), time.Since(start))
		}
	})
}

// redirect sends every request to base (scheme and host), keeping the path:
// "OpenAI itself" (no BaseURL) answered by a local server.
type redirect struct{ base *url.URL }

func (r redirect) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.URL.Scheme, req.URL.Host, req.Host = r.base.Scheme, r.base.Host, r.base.Host
	return http.DefaultTransport.RoundTrip(req)
}

func TestOpenAIMaxTokensField(t *testing.T) {
	srv := llmtest.Start(t, key)
	base, _ := url.Parse(srv.URL)
	for _, tc := range []struct {
		name, baseURL, model, field string
	}{
		{"OpenAI itself", "", "gpt-4o", "max_completion_tokens"},
		{"compatible server", srv.OpenAIBaseURL(), "llama3", "max_tokens"},
		// go-openai refuses max_tokens for OpenAI's reasoning model names.
		{"compatible server, reasoning model name", srv.OpenAIBaseURL(), "o3-mini", "max_completion_tokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := provider.New(provider.Config{Provider: provider.OpenAI, Model: tc.model, BaseURL: tc.baseURL, APIKey: key,
				HTTPClient: &http.Client{Transport: redirect{base}}})
			if err != nil {
				t.Fatal(err)
			}
			srv.Enqueue(llmtest.Text("ok"))
			req := hello
			req.MaxTokens = 300
			if _, err := m.Step(context.Background(), req, nil); err != nil {
				t.Fatal(err)
			}
			last := srv.Last()
			body := last.JSON()
			other := map[string]string{"max_tokens": "max_completion_tokens", "max_completion_tokens": "max_tokens"}[tc.field]
			if last.Path != "/v1/chat/completions" || body[tc.field] != float64(300) || body[other] != nil {
				t.Fatalf("%s %s", last.Path, last.Body)
			}
		})
	}
}

// TestOpenAIModelRefusedLocally: go-openai checks OpenAI's own model names
// before sending; its refusal is a VALIDATION error on the model, not a
// malformed reply, and nothing is sent.
func TestOpenAIModelRefusedLocally(t *testing.T) {
	srv := llmtest.Start(t, key)
	m, err := provider.New(provider.Config{Provider: provider.OpenAI, Model: openai.GPT6Sol, BaseURL: srv.OpenAIBaseURL(), APIKey: key})
	if err != nil {
		t.Fatal(err)
	}
	req := hello
	req.Tools = []provider.ToolSpec{{Name: "time__now"}}
	_, err = m.Step(context.Background(), req, nil)
	e := apierr.From(err)
	if e.Code != apierr.Validation || e.Field != "model" || !strings.Contains(e.Message, openai.GPT6Sol) {
		t.Fatalf("err %v (field %q)", err, e.Field)
	}
	if srv.Attempts() != 0 {
		t.Fatalf("attempts %d, want 0", srv.Attempts())
	}
}

func TestOpenAIEmptyToolResult(t *testing.T) {
	srv := llmtest.Start(t, key)
	m := newModel(t, srv, provider.OpenAI)
	srv.Enqueue(llmtest.Text("ok"))
	req := provider.Request{Messages: []provider.Message{
		{Role: provider.User, Text: "go"},
		{Role: provider.Assistant, ToolCalls: []provider.ToolCall{{ID: "c1", Name: "a", Arguments: "{}"}, {ID: "c2", Name: "b", Arguments: "{}"}}},
		{Role: provider.Tool, ToolResults: []provider.ToolResult{{CallID: "c1"}, {CallID: "c2", IsError: true}}},
	}}
	if _, err := m.Step(context.Background(), req, nil); err != nil {
		t.Fatal(err)
	}
	want := `[{"role":"user","content":"go"},
	 {"role":"assistant","tool_calls":[
	   {"id":"c1","type":"function","function":{"name":"a","arguments":"{}"}},
	   {"id":"c2","type":"function","function":{"name":"b","arguments":"{}"}}]},
	 {"role":"tool","tool_call_id":"c1","content":"(no output)"},
	 {"role":"tool","tool_call_id":"c2","content":"error"}]`
	if got := srv.Last().JSON()["messages"]; !jsonEq(got, want) {
		t.Fatalf("messages %s", js(got))
	}
}

// sseServer answers every chat completion with the given SSE data lines.
func sseServer(t *testing.T, lines ...string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, l := range lines {
			_, _ = io.WriteString(w, "data: "+l+"\n\n")
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1"
}

// TestOpenAIToolCallsAllIndexZero: some servers number every call 0 (or
// leave the index out); a new id starts a new call.
func TestOpenAIToolCallsAllIndexZero(t *testing.T) {
	base := sseServer(t,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"fs__read_file","arguments":"{\"path\""}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":":\"/a\"}"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_b","type":"function","function":{"name":"time__now"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"id":"call_c","type":"function","function":{"name":"echo","arguments":"{\"x\":1}"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":null}`,
		`{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}`,
	)
	m, err := provider.New(provider.Config{Provider: provider.OpenAI, Model: "m", BaseURL: base})
	if err != nil {
		t.Fatal(err)
	}
	step, err := m.Step(context.Background(), hello, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []provider.ToolCall{
		{ID: "call_a", Name: "fs__read_file", Arguments: `{"path":"/a"}`},
		{ID: "call_b", Name: "time__now", Arguments: "{}"},
		{ID: "call_c", Name: "echo", Arguments: `{"x":1}`},
	}
	if len(step.ToolCalls) != len(want) || step.StopReason != provider.StopToolUse || step.Usage != (provider.Usage{InputTokens: 5, OutputTokens: 3}) {
		t.Fatalf("step %+v", step)
	}
	for i := range want {
		if step.ToolCalls[i] != want[i] {
			t.Errorf("call %d = %+v, want %+v", i, step.ToolCalls[i], want[i])
		}
	}
}

// TestOpenAINonJSONErrorBody: an error answer that is not the API's error
// JSON (a proxy's HTML page) keeps its status and quotes the body.
func TestOpenAINonJSONErrorBody(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "<html>502 Bad Gateway</html>", http.StatusBadGateway)
	}))
	defer srv.Close()
	m, err := provider.New(provider.Config{Provider: provider.OpenAI, Model: "m", BaseURL: srv.URL + "/v1"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Step(context.Background(), hello, nil)
	e := apierr.From(err)
	if e.Code != apierr.ServiceUnavailable || !strings.Contains(e.Message, "502") || !strings.Contains(e.Message, "<html>502 Bad Gateway</html>") {
		t.Fatalf("err %v", err)
	}
}

// TestErrorBodyHidesTheKey: an error answer that echoes the request's
// Authorization (a proxy's page) is quoted to the turn's user without the
// profile's API key.
func TestErrorBodyHidesTheKey(t *testing.T) {
	const key = "sk-profile-key-0123456789abcdef"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "<html>bad upstream for "+r.Header.Get("Authorization")+"</html>", http.StatusUnauthorized)
	}))
	defer srv.Close()
	m, err := provider.New(provider.Config{Provider: provider.OpenAI, Model: "m", BaseURL: srv.URL + "/v1", APIKey: key})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Step(context.Background(), hello, nil)
	e := apierr.From(err)
	if e.Code != apierr.Unauthorized || strings.Contains(e.Message, key) || !strings.Contains(e.Message, "bad upstream for Bearer [REDACTED]") {
		t.Fatalf("err %v", err)
	}
}

// TestQuotaSpentNotRetried: OpenAI's 429 insufficient_quota (billing) does not
// pass with time: it is not waited out like a rate limit, and says so.
func TestQuotaSpentNotRetried(t *testing.T) {
	srv := llmtest.Start(t, "")
	m, err := provider.New(provider.Config{Provider: provider.OpenAI, Model: "m", BaseURL: srv.OpenAIBaseURL()})
	if err != nil {
		t.Fatal(err)
	}
	srv.Always(llmtest.QuotaSpent())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = m.Step(ctx, provider.Request{Messages: []provider.Message{{Role: provider.User, Text: "hi"}}}, nil)
	e := apierr.From(err)
	if e.Code != apierr.RateLimited || e.Field != model.ChatQuotaField || !strings.Contains(e.Message, "exceeded your current quota") || srv.Attempts() != 1 {
		t.Fatalf("err %v (field %q) after %d attempts", err, e.Field, srv.Attempts())
	}
}

// TestErrorBodyCutHidesTheKey: the key echoed across the point where the
// quoted body is cut leaves no part of it in the message (the cut came
// before the redaction, which then found no whole key to replace).
func TestErrorBodyCutHidesTheKey(t *testing.T) {
	const key = "sk-profile-key-0123456789abcdef"
	for pad := 480; pad < 520; pad++ {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(strings.Repeat("p", pad) + r.Header.Get("Authorization") + " tail"))
		}))
		m, err := provider.New(provider.Config{Provider: provider.OpenAI, Model: "m", BaseURL: srv.URL + "/v1", APIKey: key})
		if err != nil {
			t.Fatal(err)
		}
		_, err = m.Step(context.Background(), hello, nil)
		srv.Close()
		msg := apierr.From(err).Message
		if strings.Contains(msg, key[:len("sk-profile-key-01")]) {
			t.Fatalf("pad %d: the message holds part of the key: …%s", pad, msg[max(0, len(msg)-80):])
		}
	}
}
