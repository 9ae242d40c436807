package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
	gwopenai "github.com/mcpbus/mcpbus/services/gateway/openai"
)

// oaiClient is the official OpenAI Go SDK pointed at the gateway.
func oaiClient(c *chatEnv, key string) openai.Client {
	return openai.NewClient(option.WithBaseURL(c.url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0),
		option.WithRequestTimeout(2*time.Minute))
}

// TestOpenAICompatible uses openai-go as the client of /v1/chat/completions
// and /v1/models: each completion runs a real tool call inside mcpbus
// between two model steps, and the client sees only the answer.
func TestOpenAICompatible(t *testing.T) {
	t.Parallel()
	c := startChat(t)
	c.putProfile(t, "assistant", nil)
	client := oaiClient(c, c.chat)
	ctx := ctxT(t, 3*time.Minute)

	models, err := client.Models.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(models.Data) != 1 || models.Data[0].ID != "assistant" || models.Data[0].Object != "model" {
		t.Fatalf("models %+v", models.Data)
	}
	// models.retrieve: the entry the list has; an unknown one is OpenAI's 404.
	if m, err := client.Models.Get(ctx, "assistant"); err != nil || m.ID != "assistant" || m.Object != "model" || m.Created != models.Data[0].Created {
		t.Fatalf("models.retrieve: %+v %v", m, err)
	}
	if _, err := client.Models.Get(ctx, "no-such-profile"); !oaiError(err, http.StatusNotFound, "invalid_request_error", "model_not_found") {
		t.Fatalf("models.retrieve of an unknown model: %v", err)
	}
	// The gateway's own refusals are OpenAI error objects too.
	badKey := oaiClient(c, "mcpbus_nope_nope")
	if _, err := badKey.Models.List(ctx); !oaiError(err, http.StatusUnauthorized, "authentication_error", "unauthorized") {
		t.Fatalf("a bad key: %v", err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.url+"/v1/chat/completions", strings.NewReader("hi"))
	req.Header.Set("Authorization", "Bearer "+c.chat)
	req.Header.Set("Content-Type", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Error *struct {
			Message, Type string
			Param, Code   *string
		} `json:"error"`
	}
	err = json.NewDecoder(resp.Body).Decode(&body)
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusUnsupportedMediaType || body.Error == nil || body.Error.Type != "invalid_request_error" ||
		body.Error.Message == "" || body.Error.Param == nil || *body.Error.Param != "Content-Type" {
		t.Fatalf("a text/plain body: %d %+v %v", resp.StatusCode, body.Error, err)
	}

	t.Run("not streamed", func(t *testing.T) {
		c.llm.Enqueue(llmtest.ToolCalls(llmtest.Call("tm__echo", `{"message":"from openai-go"}`)), llmtest.Text("The echo said: from openai-go"))
		var resp *http.Response
		out, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: "assistant",
			Messages: []openai.ChatCompletionMessageParamUnion{
				openai.SystemMessage("Answer in one line."),
				openai.UserMessage("Hello"),
				openai.AssistantMessage("Hi, what shall I do?"),
				openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{openai.TextContentPart("Echo this:"), openai.TextContentPart("from openai-go")}),
			},
		}, option.WithResponseInto(&resp))
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Choices) != 1 || out.Choices[0].Message.Content != "The echo said: from openai-go" || out.Choices[0].FinishReason != "stop" {
			t.Fatalf("completion %+v", out.Choices)
		}
		// Two model steps, each with llmtest's default usage.
		if out.Usage.PromptTokens != 2*int64(llmtest.DefaultUsage.InputTokens) || out.Usage.CompletionTokens != 2*int64(llmtest.DefaultUsage.OutputTokens) ||
			out.Usage.TotalTokens != out.Usage.PromptTokens+out.Usage.CompletionTokens || out.Model != "assistant" {
			t.Fatalf("usage %+v, model %q", out.Usage, out.Model)
		}
		reqs := c.llm.Requests()
		first, second := reqs[len(reqs)-2], reqs[len(reqs)-1]
		// The model saw the system message, the earlier turns and the text parts joined.
		for _, want := range []string{"Answer in one line.", "Hi, what shall I do?", `Echo this:\nfrom openai-go`} {
			if !bytes.Contains(first.Body, []byte(want)) {
				t.Fatalf("the model's request lacks %q: %s", want, first.Body)
			}
		}
		if !bytes.Contains(second.Body, []byte(`"role":"tool"`)) || !bytes.Contains(second.Body, []byte("from openai-go")) {
			t.Fatalf("the tool did not run before the second step: %s", second.Body)
		}
		// The request became a conversation of its own, kept in the log.
		conv := resp.Header.Get(gwopenai.ConversationHeader)
		if !strings.HasPrefix(conv, gwopenai.ConversationPrefix) {
			t.Fatalf("conversation header %q", conv)
		}
		if r := httpDo(t, "GET", c.url+"/api/v1/chat/conversations/"+conv, c.chat, nil); r.status != http.StatusOK || !bytes.Contains(r.body, []byte(model.EntryToolResult)) {
			t.Fatalf("the completion's conversation: %d %s", r.status, r.body)
		}
	})

	// Nobody on /v1 can answer a server's request for input: the chat
	// declines it at once and the turn goes on.
	t.Run("a server that asks is declined", func(t *testing.T) {
		c.llm.Enqueue(llmtest.ToolCalls(llmtest.Call("tm__ask", `{"message":"Who are you?"}`)), llmtest.Text("The server wanted a name."))
		out, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:    "assistant",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Introduce me")},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Choices) != 1 || out.Choices[0].Message.Content != "The server wanted a name." {
			t.Fatalf("completion %+v", out.Choices)
		}
		if body := c.llm.Last().Body; !bytes.Contains(body, []byte("the user chose decline")) {
			t.Fatalf("the server did not hear decline: %s", body)
		}
	})

	t.Run("streamed", func(t *testing.T) {
		c.llm.Enqueue(llmtest.ToolCalls(llmtest.Call("tm__echo", `{"message":"streamed"}`)), llmtest.Text("The echo said: streamed, word by word"))
		stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model:         "assistant",
			Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Echo: streamed")},
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		})
		var acc openai.ChatCompletionAccumulator
		chunks := 0
		for stream.Next() {
			chunks++
			if !acc.AddChunk(stream.Current()) {
				t.Fatalf("chunk %d does not fit the previous ones: %+v", chunks, stream.Current())
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if len(acc.Choices) != 1 || acc.Choices[0].Message.Content != "The echo said: streamed, word by word" || acc.Choices[0].FinishReason != "stop" {
			t.Fatalf("accumulated %+v", acc.Choices)
		}
		if chunks < 4 || acc.Usage.TotalTokens == 0 {
			t.Fatalf("%d chunks, usage %+v: expected several text deltas and a usage chunk", chunks, acc.Usage)
		}
		if !bytes.Contains(c.llm.Last().Body, []byte(`"role":"tool"`)) {
			t.Fatal("no tool result reached the model")
		}
	})

	t.Run("provider error", func(t *testing.T) {
		c.llm.Enqueue(llmtest.Error(http.StatusBadRequest))
		_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "assistant",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("fail")}})
		// The provider's 400 ends the turn with error VALIDATION_ERROR: the
		// same status, as an OpenAI error object.
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Type != "invalid_request_error" || apiErr.Message == "" {
			t.Fatalf("a failing model: %v", err)
		}
	})

	t.Run("client gone cancels the turn", func(t *testing.T) {
		c.llm.Enqueue(llmtest.Slow(llmtest.Text("a slow answer of many many words"), 300*time.Millisecond))
		rctx, cancel := context.WithCancel(ctx)
		req, _ := http.NewRequestWithContext(rctx, "POST", c.url+"/v1/chat/completions",
			strings.NewReader(`{"model":"assistant","stream":true,"messages":[{"role":"user","content":"take your time"}]}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+c.chat)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: ") {
			t.Fatalf("first line %q: %v", line, err)
		}
		cancel()
		conv := resp.Header.Get(gwopenai.ConversationHeader)
		testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
			r := httpDo(t, "GET", c.url+"/api/v1/chat/conversations/"+conv, c.chat, nil)
			var hist model.ChatHistoryReply
			r.decode(t, &hist)
			for _, e := range hist.Entries {
				if e.Kind == model.EntryTurnEnd {
					return bytes.Contains(e.Payload, []byte(`"reason":"cancelled"`)), "the turn ended " + string(e.Payload)
				}
			}
			return false, "the turn has not ended"
		})
	})

	t.Run("unknown model", func(t *testing.T) {
		_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "no-such-profile",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || apiErr.Code != "model_not_found" || apiErr.Param != "model" {
			t.Fatalf("unknown model: %v", err)
		}
	})

	t.Run("image part refused", func(t *testing.T) {
		_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "assistant",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{
				openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: "https://example.com/a.png"})})}})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Param != "messages[0].content[0].type" {
			t.Fatalf("an image part: %v", err)
		}
	})

	t.Run("call key refused", func(t *testing.T) {
		callKey := c.createKey(t, model.KeyCreateRequest{Name: "tools only", Scopes: []string{model.KeyScopeCall}}).Key
		refused := oaiClient(c, callKey)
		_, err := refused.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "assistant",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
		if !oaiError(err, http.StatusForbidden, "permission_error", "unauthorized") {
			t.Fatalf("a call-scope key: %v", err)
		}
	})
}

// oaiError reports whether err is an OpenAI error object with that status,
// type and code, and a message.
func oaiError(err error, status int, typ, code string) bool {
	var apiErr *openai.Error
	return errors.As(err, &apiErr) && apiErr.StatusCode == status && apiErr.Type == typ && apiErr.Code == code && apiErr.Message != ""
}
