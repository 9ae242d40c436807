package openai

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// post sends a completion request and returns the response (body unread).
func post(t *testing.T, ctx context.Context, url, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "POST", url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

func decodeBody(t *testing.T, resp *http.Response, v any) {
	t.Helper()
	data, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("status %d: undecodable %s", resp.StatusCode, data)
	}
}

// twoSteps is a turn with text, a tool call, more text and usage per step.
func twoSteps(model.ChatSendRequest) []model.ChatEvent {
	return []model.ChatEvent{text("Let me "), text("look."), toolCall(model.ToolCallStarted), toolCall(model.ToolCallCompleted),
		usage(10, 5), text("It is "), text("42."), usage(20, 3), done(model.TurnFinal)}
}

func TestCompletionNotStreamed(t *testing.T) {
	f, nc := startFake(t, twoSteps)
	url := serve(t, nc, Options{})
	resp := post(t, t.Context(), url, `{"model":"p1","temperature":0.2,"messages":[
		{"role":"developer","content":"be brief"},
		{"role":"user","content":"hi"},
		{"role":"assistant","content":null},
		{"role":"user","content":[{"type":"text","text":"what"},{"type":"text","text":"is it?"}]}]}`)
	var out Completion
	decodeBody(t, resp, &out)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %+v", resp.StatusCode, out)
	}
	conv := resp.Header.Get(ConversationHeader)
	if !strings.HasPrefix(conv, ConversationPrefix) || !model.ValidConversationID(conv) {
		t.Fatalf("conversation header %q", conv)
	}
	if out.Object != "chat.completion" || out.Model != "p1" || len(out.Choices) != 1 {
		t.Fatalf("completion %+v", out)
	}
	c := out.Choices[0]
	if c.Message == nil || c.Message.Content != "Let me look.\n\nIt is 42." || c.Message.Role != "assistant" {
		t.Fatalf("message %+v", c.Message)
	}
	if c.FinishReason == nil || *c.FinishReason != "stop" {
		t.Fatalf("finish reason %v", c.FinishReason)
	}
	if u := out.Usage; u == nil || u.PromptTokens != 30 || u.CompletionTokens != 8 || u.TotalTokens != 38 {
		t.Fatalf("usage %+v", out.Usage)
	}
	sent := f.lastSend(t)
	want := []model.ChatContextMessage{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hi"}, {Role: "assistant"}}
	if sent.Conversation != conv || sent.Profile != "p1" || sent.Message != "what\nis it?" || len(sent.Context) != len(want) || !sent.NoInput {
		t.Fatalf("sent %+v", sent)
	}
	for i := range want {
		if sent.Context[i] != want[i] {
			t.Fatalf("context %d: %+v, want %+v", i, sent.Context[i], want[i])
		}
	}
}

// sseData reads the data lines of a stream until it ends.
func sseData(t *testing.T, r io.Reader) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

func TestCompletionStreamed(t *testing.T) {
	_, nc := startFake(t, twoSteps)
	url := serve(t, nc, Options{})
	resp := post(t, t.Context(), url, `{"model":"p1","stream":true,"stream_options":{"include_usage":true},
		"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	data := sseData(t, resp.Body)
	if len(data) < 4 || data[len(data)-1] != "[DONE]" {
		t.Fatalf("frames %q", data)
	}
	var text strings.Builder
	var finish []string
	var usage *Usage
	for i, d := range data[:len(data)-1] {
		var c Completion
		if err := json.Unmarshal([]byte(d), &c); err != nil {
			t.Fatalf("frame %d %q: %v", i, d, err)
		}
		if c.Object != "chat.completion.chunk" || c.ID != data0ID(t, data) || c.Model != "p1" {
			t.Fatalf("frame %d: %+v", i, c)
		}
		if i == 0 && (len(c.Choices) != 1 || c.Choices[0].Delta.Role != "assistant") {
			t.Fatalf("first chunk has no role: %s", d)
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil {
				text.WriteString(*ch.Delta.Content)
			}
			if ch.FinishReason != nil {
				finish = append(finish, *ch.FinishReason)
			}
		}
		if c.Usage != nil {
			if len(c.Choices) != 0 {
				t.Fatalf("the usage chunk has choices: %s", d)
			}
			usage = c.Usage
		}
	}
	if text.String() != "Let me look.\n\nIt is 42." || len(finish) != 1 || finish[0] != "stop" {
		t.Fatalf("text %q, finish reasons %q", text.String(), finish)
	}
	if usage == nil || usage.TotalTokens != 38 {
		t.Fatalf("usage %+v", usage)
	}
}

func data0ID(t *testing.T, data []string) string {
	t.Helper()
	var c Completion
	_ = json.Unmarshal([]byte(data[0]), &c)
	return c.ID
}

func TestCompletionErrorEnd(t *testing.T) {
	failing := func(prefix ...model.ChatEvent) func(model.ChatSendRequest) []model.ChatEvent {
		return func(model.ChatSendRequest) []model.ChatEvent {
			return append(prefix,
				model.ChatEvent{Kind: model.ChatEventError, Error: apierr.New(apierr.RateLimited, "the provider said 429")},
				model.ChatEvent{Kind: model.ChatEventDone, Done: &model.ChatDone{Reason: model.TurnError, Message: "provider failed"}})
		}
	}
	ran := []model.ChatEvent{toolCall(model.ToolCallStarted), toolCall(model.ToolCallCompleted), usage(10, 5)}
	t.Run("not streamed", func(t *testing.T) {
		_, nc := startFake(t, failing(ran...))
		resp := post(t, t.Context(), serve(t, nc, Options{}), `{"model":"p1","messages":[{"role":"user","content":"hi"}]}`)
		var out errorBody
		decodeBody(t, resp, &out)
		if resp.StatusCode != http.StatusTooManyRequests || out.Error == nil || out.Error.Type != "rate_limit_error" ||
			out.Error.Message != "the provider said 429" || *out.Error.Code != "rate_limited" {
			t.Fatalf("status %d: %+v", resp.StatusCode, out.Error)
		}
		// The turn ran (its tools may have): the SDKs must not send it again.
		if got := resp.Header.Get("X-Should-Retry"); got != "false" {
			t.Fatalf("X-Should-Retry %q", got)
		}
	})
	t.Run("nothing ran", func(t *testing.T) {
		// The provider failed the first step: a retry is safe, the SDK's own.
		_, nc := startFake(t, failing())
		resp := post(t, t.Context(), serve(t, nc, Options{}), `{"model":"p1","messages":[{"role":"user","content":"hi"}]}`)
		var out errorBody
		decodeBody(t, resp, &out)
		if resp.StatusCode != http.StatusTooManyRequests || out.Error == nil || resp.Header.Get("X-Should-Retry") != "" || resp.Header.Get(ConversationHeader) != "" {
			t.Fatalf("status %d (X-Should-Retry %q, conversation %q): %+v", resp.StatusCode, resp.Header.Get("X-Should-Retry"),
				resp.Header.Get(ConversationHeader), out.Error)
		}
	})
	t.Run("streamed before any text", func(t *testing.T) {
		_, nc := startFake(t, failing(ran...))
		resp := post(t, t.Context(), serve(t, nc, Options{}), `{"model":"p1","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
		var out errorBody
		decodeBody(t, resp, &out)
		if resp.StatusCode != http.StatusTooManyRequests || out.Error == nil || out.Error.Type != "rate_limit_error" || resp.Header.Get("X-Should-Retry") != "false" {
			t.Fatalf("status %d (X-Should-Retry %q): %+v", resp.StatusCode, resp.Header.Get("X-Should-Retry"), out.Error)
		}
	})
	t.Run("the provider refusing the profile's key", func(t *testing.T) {
		// Not the client's key (a 401 would read so to an OpenAI SDK).
		_, nc := startFake(t, func(model.ChatSendRequest) []model.ChatEvent {
			return []model.ChatEvent{
				{Kind: model.ChatEventError, Error: apierr.New(apierr.Unauthorized, "invalid API key")},
				{Kind: model.ChatEventDone, Done: &model.ChatDone{Reason: model.TurnError, Message: "provider failed"}}}
		})
		resp := post(t, t.Context(), serve(t, nc, Options{}), `{"model":"p1","messages":[{"role":"user","content":"hi"}]}`)
		var out errorBody
		decodeBody(t, resp, &out)
		if resp.StatusCode != http.StatusBadGateway || out.Error == nil || out.Error.Type != "server_error" || !strings.Contains(out.Error.Message, "provider") {
			t.Fatalf("status %d: %+v", resp.StatusCode, out.Error)
		}
	})
	t.Run("streamed after text", func(t *testing.T) {
		_, nc := startFake(t, failing(text("partial")))
		resp := post(t, t.Context(), serve(t, nc, Options{}), `{"model":"p1","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		data := sseData(t, resp.Body)
		var last errorBody
		if err := json.Unmarshal([]byte(data[len(data)-1]), &last); err != nil || last.Error == nil || last.Error.Type != "rate_limit_error" {
			t.Fatalf("the stream does not end with the error: %q", data)
		}
	})
}

func TestFinishReasons(t *testing.T) {
	for _, c := range []struct {
		name string
		done model.ChatDone
		want string
	}{
		{"final", model.ChatDone{Reason: model.TurnFinal, StopReason: model.ChatStopEndTurn}, "stop"},
		{"final without a stop reason", model.ChatDone{Reason: model.TurnFinal}, "stop"},
		{"final cut by the provider's token limit", model.ChatDone{Reason: model.TurnFinal, StopReason: model.ChatStopMaxTokens}, "length"},
		{"final stopped by the provider's filter", model.ChatDone{Reason: model.TurnFinal, StopReason: model.ChatStopRefusal}, "content_filter"},
		{"step bound", model.ChatDone{Reason: model.TurnMaxSteps}, "length"},
		{"token budget", model.ChatDone{Reason: model.TurnBudget}, "length"},
		{"repeated calls", model.ChatDone{Reason: model.TurnRepeated}, "length"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, nc := startFake(t, func(model.ChatSendRequest) []model.ChatEvent {
				d := c.done
				return []model.ChatEvent{text("so far"), toolCall(model.ToolCallCompleted), {Kind: model.ChatEventDone, Done: &d}}
			})
			url := serve(t, nc, Options{})
			resp := post(t, t.Context(), url, `{"model":"p1","messages":[{"role":"user","content":"hi"}]}`)
			var out Completion
			decodeBody(t, resp, &out)
			if resp.StatusCode != http.StatusOK || len(out.Choices) != 1 || *out.Choices[0].FinishReason != c.want || out.Choices[0].Message.Content != "so far" {
				t.Fatalf("status %d: %+v", resp.StatusCode, out)
			}
			resp = post(t, t.Context(), url, `{"model":"p1","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
			data := sseData(t, resp.Body)
			var chunk Completion
			if len(data) < 2 || json.Unmarshal([]byte(data[len(data)-2]), &chunk) != nil || len(chunk.Choices) != 1 ||
				chunk.Choices[0].FinishReason == nil || *chunk.Choices[0].FinishReason != c.want {
				t.Fatalf("streamed: %q", data)
			}
		})
	}
}

// A user whose conversations hold their quota gets OpenAI's
// insufficient_quota, which the SDKs must not retry; other 429s stay
// rate_limit_error (retrying them is right).
func TestQuotaSpent(t *testing.T) {
	for _, c := range []struct {
		refuse          error
		typ, code, skip string
	}{
		{apierr.New(apierr.RateLimited, "your conversations hold 256 MiB").WithField(model.ChatQuotaField), "insufficient_quota", "insufficient_quota", "false"},
		{apierr.New(apierr.RateLimited, "slow down"), "rate_limit_error", "rate_limited", ""},
	} {
		f, nc := startFake(t, twoSteps)
		f.mu.Lock()
		f.refuse = c.refuse
		f.mu.Unlock()
		resp := post(t, t.Context(), serve(t, nc, Options{}), `{"model":"p1","messages":[{"role":"user","content":"hi"}]}`)
		var out errorBody
		decodeBody(t, resp, &out)
		if resp.StatusCode != http.StatusTooManyRequests || out.Error == nil || out.Error.Type != c.typ || out.Error.Code == nil ||
			*out.Error.Code != c.code || resp.Header.Get("X-Should-Retry") != c.skip {
			t.Fatalf("status %d, X-Should-Retry %q: %+v", resp.StatusCode, resp.Header.Get("X-Should-Retry"), out.Error)
		}
	}
}

func TestUnknownModel(t *testing.T) {
	f, nc := startFake(t, twoSteps)
	url := serve(t, nc, Options{})
	for _, m := range []string{"nope", "GPT-4o"} {
		resp := post(t, t.Context(), url, `{"model":"`+m+`","messages":[{"role":"user","content":"hi"}]}`)
		var out errorBody
		decodeBody(t, resp, &out)
		if resp.StatusCode != http.StatusNotFound || out.Error == nil || out.Error.Code == nil || *out.Error.Code != "model_not_found" {
			t.Fatalf("model %s: status %d: %+v", m, resp.StatusCode, out.Error)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.sends) != 0 {
		t.Fatalf("an unknown model still sent %d messages", len(f.sends))
	}
}

func TestBadRequests(t *testing.T) {
	long := strings.Repeat("x", model.MaxChatMessage+1)
	_, nc := startFake(t, twoSteps)
	url := serve(t, nc, Options{})
	for body, param := range map[string]string{
		`{"model":"p1","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`: "messages[0].content[0].type",
		`{"model":"p1","messages":[{"role":"assistant","content":"hi"}]}`:                                      "messages[0].role",
		`{"model":"p1","messages":[{"role":"tool","content":"x"},{"role":"user","content":"hi"}]}`:             "messages[0].role",
		`{"model":"p1","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function"}]}`:             "tools",
		`{"model":"p1","messages":[]}`: "messages",
		// What a client relies on and mcpbus cannot honour is refused, not
		// ignored: a JSON answer, client tools by their legacy name, a forced
		// tool call, log probabilities, n > 1.
		`{"model":"p1","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{}}}}`: "response_format",
		`{"model":"p1","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_object"}}`:                                        "response_format",
		`{"model":"p1","messages":[{"role":"user","content":"hi"}],"functions":[{"name":"f"}]}`:                                                      "functions",
		`{"model":"p1","messages":[{"role":"user","content":"hi"}],"tool_choice":"required"}`:                                                        "tool_choice",
		`{"model":"p1","messages":[{"role":"user","content":"hi"}],"tool_choice":{"type":"function","function":{"name":"f"}}}`:                       "tool_choice",
		`{"model":"p1","messages":[{"role":"user","content":"hi"}],"logprobs":true}`:                                                                 "logprobs",
		`{"model":"p1","messages":[{"role":"user","content":"hi"}],"n":2}`:                                                                           "n",
		`{"model":"p1","messages":[{"role":"user","content":"hi"}],"stream_options":{"include_usage":true}}`:                                         "stream_options",
		// The chat service's bounds, named in the request's terms.
		`{"model":"p1","messages":[{"role":"system","content":"be brief"},{"role":"assistant","content":"` + long + `"},{"role":"user","content":"hi"}]}`: "messages[1].content",
		`{"model":"p1","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"` + long + `"}]}`:                                     "messages[1].content",
		`{"model":"p1","messages":[` + strings.Repeat(`{"role":"user","content":"a"},`, model.MaxChatContext+1) + `{"role":"user","content":"hi"}]}`:      "messages",
	} {
		resp := post(t, t.Context(), url, body)
		var out errorBody
		decodeBody(t, resp, &out)
		if resp.StatusCode != http.StatusBadRequest || out.Error == nil || out.Error.Type != "invalid_request_error" ||
			out.Error.Param == nil || *out.Error.Param != param {
			t.Errorf("%s: status %d: %+v", body, resp.StatusCode, out.Error)
		}
	}
}

func TestTurnTimeoutCancels(t *testing.T) {
	f, nc := startFake(t, func(model.ChatSendRequest) []model.ChatEvent { return nil }) // never done
	resp := post(t, t.Context(), serve(t, nc, Options{TurnTimeout: 300 * time.Millisecond}),
		`{"model":"p1","messages":[{"role":"user","content":"hi"}]}`)
	var out errorBody
	decodeBody(t, resp, &out)
	if resp.StatusCode != http.StatusGatewayTimeout || out.Error == nil || *out.Error.Code != "timeout" {
		t.Fatalf("status %d: %+v", resp.StatusCode, out.Error)
	}
	select {
	case c := <-f.cancels:
		if c.Conversation != resp.Header.Get(ConversationHeader) || c.Turn != "t1" {
			t.Fatalf("cancelled %+v", c)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the timed-out turn was not cancelled")
	}
}

func TestClientGoneCancels(t *testing.T) {
	f, nc := startFake(t, func(model.ChatSendRequest) []model.ChatEvent { return []model.ChatEvent{text("thinking")} })
	ctx, cancel := context.WithCancel(t.Context())
	resp := post(t, ctx, serve(t, nc, Options{Heartbeat: 50 * time.Millisecond}),
		`{"model":"p1","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	rd := bufio.NewReader(resp.Body)
	line, err := rd.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first line %q: %v", line, err)
	}
	cancel()
	select {
	case c := <-f.cancels:
		if c.Conversation != resp.Header.Get(ConversationHeader) {
			t.Fatalf("cancelled %+v", c)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the turn of a client that went away was not cancelled")
	}
}

func TestModels(t *testing.T) {
	_, nc := startFake(t, twoSteps)
	resp, err := http.Get(serve(t, nc, Options{}) + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out ModelList
	decodeBody(t, resp, &out)
	want := ModelList{Object: "list", Data: []Model{{ID: "p1", Object: "model", Created: fakeProfile.CreatedAt.Unix(), OwnedBy: "mcpbus"}}}
	got, _ := json.Marshal(out)
	exp, _ := json.Marshal(want)
	if !bytes.Equal(got, exp) {
		t.Fatalf("models %s, want %s", got, exp)
	}
}

func TestRevokedKeyAndStopEndTurns(t *testing.T) {
	f, nc := startFake(t, func(model.ChatSendRequest) []model.ChatEvent { return nil }) // never done
	url, a := serveAPI(t, nc, Options{})
	for _, c := range []struct {
		end    func()
		status int
		code   string
	}{
		{func() { a.DropKey("") }, http.StatusUnauthorized, "key_revoked"}, // no auth middleware: key id ""
		{a.Stop, http.StatusServiceUnavailable, "shutting_down"},
	} {
		var conv string
		sent := waitSend(f, &conv) // counts the sends before this one starts
		got := make(chan *http.Response, 1)
		go func() { got <- post(t, t.Context(), url, `{"model":"p1","messages":[{"role":"user","content":"hi"}]}`) }()
		select { // the turn started: end it from the gateway's side
		case <-time.After(5 * time.Second):
			t.Fatal("no send")
		case <-sent:
		}
		c.end()
		resp := <-got
		var out errorBody
		decodeBody(t, resp, &out)
		if resp.StatusCode != c.status || out.Error == nil || *out.Error.Code != c.code {
			t.Fatalf("status %d: %+v", resp.StatusCode, out.Error)
		}
		if cancelled := <-f.cancels; cancelled.Conversation != conv {
			t.Fatalf("cancelled %+v, want %s", cancelled, conv)
		}
	}
	// Stopped: new completions are refused at once.
	resp := post(t, t.Context(), url, `{"model":"p1","messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("after Stop: %d", resp.StatusCode)
	}
}

// waitSend closes its channel once a new chat.send reached f, and stores
// its conversation.
func waitSend(f *fakeChat, conv *string) <-chan struct{} {
	f.mu.Lock()
	n := len(f.sends)
	f.mu.Unlock()
	ch := make(chan struct{})
	go func() {
		for {
			f.mu.Lock()
			if len(f.sends) > n {
				*conv = f.sends[len(f.sends)-1].Conversation
				f.mu.Unlock()
				close(ch)
				return
			}
			f.mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return ch
}

// TestBoundsFitTheClientTimeout: the timeouts the OpenAI SDKs announce
// shorten the turn (not streamed) or the keep-alive interval (streamed).
func TestBoundsFitTheClientTimeout(t *testing.T) {
	a := New(nil, Options{})
	for _, tc := range []struct {
		header, value string
		stream        bool
		limit, beat   time.Duration
	}{
		{"", "", false, DefaultTurnTimeout, DefaultHeartbeat},
		{"X-Stainless-Timeout", "3", false, 2 * time.Second, DefaultHeartbeat},
		{"X-Stainless-Timeout", "1.5", false, 750 * time.Millisecond, DefaultHeartbeat},
		{"X-Stainless-Timeout", "20", false, 16 * time.Second, DefaultHeartbeat},
		{"X-Stainless-Timeout", "3", true, DefaultTurnTimeout, 1500 * time.Millisecond},
		{"X-Stainless-Read-Timeout", "600.0", false, 595 * time.Second, DefaultHeartbeat},
		{"X-Stainless-Read-Timeout", "3600", false, DefaultTurnTimeout, DefaultHeartbeat},
		{"X-Stainless-Read-Timeout", "8.5", true, DefaultTurnTimeout, 4250 * time.Millisecond},
		{"X-Stainless-Timeout", "0", false, DefaultTurnTimeout, DefaultHeartbeat},
		{"X-Stainless-Timeout", "soon", true, DefaultTurnTimeout, DefaultHeartbeat},
	} {
		r, _ := http.NewRequest("POST", "/v1/chat/completions", nil)
		if tc.header != "" {
			r.Header.Set(tc.header, tc.value)
		}
		if limit, beat := a.bounds(r, tc.stream); limit != tc.limit || beat != tc.beat {
			t.Errorf("%s %q stream %v: limit %s beat %s, want %s %s", tc.header, tc.value, tc.stream, limit, beat, tc.limit, tc.beat)
		}
	}
}

// tool_choice "none" is OpenAI's "call no tool": the send asks the chat for
// a turn without tools. "auto" (and no tool_choice) leaves the profile's
// tools to the model; a forced or named tool is refused (TestBadRequests).
func TestToolChoice(t *testing.T) {
	f, nc := startFake(t, twoSteps)
	url := serve(t, nc, Options{})
	for choice, noTools := range map[string]bool{`,"tool_choice":"none"`: true, `,"tool_choice":  "none" `: true,
		`,"tool_choice":"auto"`: false, ``: false, `,"tool_choice":null`: false} {
		resp := post(t, t.Context(), url, `{"model":"p1","messages":[{"role":"user","content":"hi"}]`+choice+`}`)
		var out Completion
		decodeBody(t, resp, &out)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d", choice, resp.StatusCode)
		}
		if sent := f.lastSend(t); sent.NoTools != noTools {
			t.Errorf("tool_choice %q: sent no_tools %v, want %v", choice, sent.NoTools, noTools)
		}
	}
}

// A turn ended by a conversation too long for the model's context window
// answers OpenAI's context_length_exceeded (400, param messages), which
// clients recognize, with the chat's message saying what to do.
func TestContextLengthExceeded(t *testing.T) {
	_, nc := startFake(t, func(model.ChatSendRequest) []model.ChatEvent {
		return []model.ChatEvent{
			{Kind: model.ChatEventError, Error: apierr.Invalid(model.ChatContextField, "The conversation is too long for the model's context window; start a new conversation")},
			{Kind: model.ChatEventDone, Done: &model.ChatDone{Reason: model.TurnError, Message: "too long"}}}
	})
	resp := post(t, t.Context(), serve(t, nc, Options{}), `{"model":"p1","messages":[{"role":"user","content":"hi"}]}`)
	var out errorBody
	decodeBody(t, resp, &out)
	if resp.StatusCode != http.StatusBadRequest || out.Error == nil || out.Error.Type != "invalid_request_error" ||
		out.Error.Code == nil || *out.Error.Code != "context_length_exceeded" || out.Error.Param == nil || *out.Error.Param != "messages" ||
		!strings.Contains(out.Error.Message, "start a new conversation") {
		t.Fatalf("status %d: %+v", resp.StatusCode, out.Error)
	}
}
