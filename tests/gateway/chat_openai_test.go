package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
	gwopenai "github.com/mcpbus/mcpbus/services/gateway/openai"
	"github.com/mcpbus/mcpbus/tests/internal/clitest"
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

	// tool_choice "none": the model is offered no tool, and a call it
	// makes anyway does not run; the step is the answer, as on OpenAI.
	t.Run("tool_choice none runs no tool", func(t *testing.T) {
		before := len(c.llm.Requests())
		c.llm.Enqueue(llmtest.Reply{Text: "No tools, then.", ToolCalls: []llmtest.ToolCall{{Name: "tm__echo", Arguments: `{"message":"must not run"}`}}})
		var resp *http.Response
		out, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:      "assistant",
			Messages:   []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Echo: must not run")},
			ToolChoice: openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String(string(openai.ChatCompletionToolChoiceOptionAutoNone))},
		}, option.WithResponseInto(&resp))
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Choices) != 1 || out.Choices[0].Message.Content != "No tools, then." || out.Choices[0].FinishReason != "stop" {
			t.Fatalf("completion %+v", out.Choices)
		}
		reqs := c.llm.Requests()
		if len(reqs) != before+1 || bytes.Contains(reqs[len(reqs)-1].Body, []byte("tm__echo")) {
			t.Fatalf("%d model requests; the last offered tools: %s", len(reqs)-before, reqs[len(reqs)-1].Body)
		}
		conv := resp.Header.Get(gwopenai.ConversationHeader)
		if r := httpDo(t, "GET", c.url+"/api/v1/chat/conversations/"+conv, c.chat, nil); r.status != http.StatusOK || bytes.Contains(r.body, []byte(model.EntryToolResult)) {
			t.Fatalf("the completion's conversation: %d %s", r.status, r.body)
		}
		// A forced or named tool cannot be honoured: 400 naming tool_choice.
		for _, tc := range []openai.ChatCompletionToolChoiceOptionUnionParam{
			{OfAuto: openai.String(string(openai.ChatCompletionToolChoiceOptionAutoRequired))},
			{OfFunctionToolChoice: &openai.ChatCompletionNamedToolChoiceParam{Function: openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "tm__echo"}}},
			{OfFunctionToolChoice: &openai.ChatCompletionNamedToolChoiceParam{Function: openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "not_allowed"}}},
		} {
			_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "assistant",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, ToolChoice: tc})
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Param != "tool_choice" {
				t.Fatalf("tool_choice %+v: %v", tc, err)
			}
		}
		if n := len(c.llm.Requests()); n != before+1 {
			t.Fatalf("a refused tool_choice reached the model (%d requests)", n-before)
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

	// The official JavaScript SDK (the openai npm package, pinned in
	// tests/npm): the models, a completion and a stream with usage, each
	// running the tool, and a wrong key as its AuthenticationError.
	t.Run("the openai npm SDK", func(t *testing.T) {
		node, err := exec.LookPath("node")
		if err != nil {
			t.Fatalf("node is not installed: %v", err)
		}
		dir := t.TempDir()
		if err := os.Symlink(filepath.Join(clitest.RepoRoot(t), "tests", "npm", "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
			t.Fatal(err)
		}
		script := filepath.Join(dir, "openai.mjs")
		if err := os.WriteFile(script, []byte(openaiNodeScript), 0o600); err != nil {
			t.Fatal(err)
		}
		c.llm.Enqueue(llmtest.ToolCalls(llmtest.Call("tm__echo", `{"message":"from openai-node"}`)), llmtest.Text("The echo said: from openai-node"),
			llmtest.ToolCalls(llmtest.Call("tm__echo", `{"message":"node stream"}`)), llmtest.Text("The echo said: node stream, in pieces"))
		out, err := exec.CommandContext(ctxT(t, 2*time.Minute), node, script, c.url+"/v1", c.chat).CombinedOutput()
		if err != nil {
			t.Fatalf("node openai.mjs: %v\n%s", err, out)
		}
		var got struct {
			Models       []string
			Done, Finish string
			Text         string
			Chunks       int
			Usage        *struct {
				TotalTokens int `json:"total_tokens"`
			}
			StreamFinish string
			BadStatus    int
			BadName      string
		}
		if err := json.Unmarshal(bytes.TrimSpace(out), &got); err != nil {
			t.Fatalf("the script's output: %v\n%s", err, out)
		}
		if len(got.Models) != 1 || got.Models[0] != "assistant" || got.Done != "The echo said: from openai-node" || got.Finish != "stop" {
			t.Fatalf("models and completion: %s", out)
		}
		if got.Text != "The echo said: node stream, in pieces" || got.StreamFinish != "stop" || got.Chunks < 4 || got.Usage == nil || got.Usage.TotalTokens == 0 {
			t.Fatalf("stream: %s", out)
		}
		if got.BadStatus != http.StatusUnauthorized || got.BadName != "AuthenticationError" {
			t.Fatalf("a wrong key: %s", out)
		}
		reqs := c.llm.Requests()
		if !bytes.Contains(reqs[len(reqs)-1].Body, []byte(`"role":"tool"`)) || !bytes.Contains(reqs[len(reqs)-1].Body, []byte("node stream")) {
			t.Fatal("the stream's tool result did not reach the model")
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

// openaiNodeScript drives /v1 with the openai npm package: it prints one
// JSON object of what it saw.
const openaiNodeScript = `
import OpenAI from "openai";
const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120000 });
const models = [];
for await (const m of client.models.list()) models.push(m.id);
const done = await client.chat.completions.create({ model: "assistant", messages: [{ role: "user", content: "Echo: from openai-node" }] });
const stream = await client.chat.completions.create({ model: "assistant", stream: true, stream_options: { include_usage: true },
  messages: [{ role: "user", content: "Echo: node stream" }] });
let text = "", chunks = 0, usage = null, streamFinish = "";
for await (const chunk of stream) {
  chunks++;
  if (chunk.usage) usage = chunk.usage;
  for (const c of chunk.choices) {
    text += c.delta?.content ?? "";
    if (c.finish_reason) streamFinish = c.finish_reason;
  }
}
let badStatus = 0, badName = "";
try {
  await new OpenAI({ baseURL, apiKey: "mcpbus_nope_nope", maxRetries: 0 }).models.list();
} catch (e) {
  badStatus = e.status;
  badName = e.constructor.name;
}
console.log(JSON.stringify({ models, done: done.choices[0].message.content, finish: done.choices[0].finish_reason, text, chunks, usage, streamFinish, badStatus, badName }));
`
