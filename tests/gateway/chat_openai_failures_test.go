package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/tests/internal/clitest"
)

// nodeOutcome is what openaiFailureScript saw of one completion.
type nodeOutcome struct {
	Text       string  `json:"text"`
	Status     int     `json:"status"`
	Name       string  `json:"name"`
	Message    string  `json:"message"`
	RetryAfter string  `json:"retryAfter"`
	Seconds    float64 `json:"seconds"`
	// Conversation is the stream's X-Mcpbus-Conversation.
	Conversation string `json:"conversation"`
}

// runNodeOpenAI runs one completion with the openai npm SDK (options as
// JSON: maxRetries, timeout of the request in ms, stream) and returns what
// it saw.
func runNodeOpenAI(t *testing.T, c *chatEnv, opts string) nodeOutcome {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed: %v", err)
	}
	dir := t.TempDir()
	if err := os.Symlink(filepath.Join(clitest.RepoRoot(t), "tests", "npm", "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "failure.mjs")
	if err := os.WriteFile(script, []byte(openaiFailureScript), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctxT(t, 2*time.Minute), node, script, c.url+"/v1", c.chat, opts).CombinedOutput()
	if err != nil {
		t.Fatalf("node failure.mjs: %v\n%s", err, out)
	}
	var got nodeOutcome
	if err := json.Unmarshal(bytes.TrimSpace(out), &got); err != nil {
		t.Fatalf("the script's output: %v\n%s", err, out)
	}
	return got
}

// openaiFailureScript makes one completion with the openai npm package and
// prints its text, or its error's status, class, message and Retry-After.
const openaiFailureScript = `
import OpenAI from "openai";
const [baseURL, apiKey, optsJSON] = process.argv.slice(2);
const opts = JSON.parse(optsJSON);
const client = new OpenAI({ baseURL, apiKey, maxRetries: opts.maxRetries ?? 0, timeout: 120000 });
// A timeout of the request's own: the SDK announces it (X-Stainless-Timeout).
const reqOpts = opts.timeout ? { timeout: opts.timeout } : {};
// abortAfter (ms): the caller gives up with an AbortController.
if (opts.abortAfter) {
  const abort = new AbortController();
  setTimeout(() => abort.abort(), opts.abortAfter);
  reqOpts.signal = abort.signal;
}
const start = Date.now();
const out = { text: "", status: 0, name: "", message: "", retryAfter: "", seconds: 0, conversation: "" };
try {
  // big: a message of that many bytes.
  const req = { model: "assistant", messages: [{ role: "user", content: opts.big ? "x".repeat(opts.big) : "hi" }] };
  if (opts.stream) {
    const { data: stream, response } = await client.chat.completions.create({ ...req, stream: true }, reqOpts).withResponse();
    out.conversation = response.headers.get("x-mcpbus-conversation") ?? "";
    for await (const chunk of stream) {
      for (const c of chunk.choices) out.text += c.delta?.content ?? "";
    }
  } else {
    out.text = (await client.chat.completions.create(req, reqOpts)).choices[0].message.content;
  }
} catch (e) {
  out.status = e.status ?? 0;
  out.name = e.constructor.name;
  out.message = e.message;
  out.retryAfter = e.headers?.get?.("retry-after") ?? "";
}
out.seconds = (Date.now() - start) / 1000;
console.log(JSON.stringify(out));
`

// TestOpenAIUpstreamFailures: what an openai SDK client sees of a failing
// model provider. A 429 on the turn's first step (nothing ran yet) reaches
// it at once as a 429 with the provider's Retry-After, which the SDK's own
// retry obeys, instead of after minutes of the chat's retries. A stream the
// provider ends mid-answer is an error, not a short answer.
func TestOpenAIUpstreamFailures(t *testing.T) {
	t.Parallel()
	c := startChat(t)
	c.putProfile(t, "assistant", nil)

	t.Run("passed through", func(t *testing.T) {
		c.llm.Always(llmtest.RateLimited("7"))
		got := runNodeOpenAI(t, c, `{"maxRetries":0}`)
		if got.Status != 429 || got.Name != "RateLimitError" || got.RetryAfter != "7" || got.Seconds > 5 {
			t.Fatalf("an upstream 429: %+v", got)
		}
		// The turn that ran nothing leaves no conversation behind.
		var list model.ChatListReply
		httpDo(t, "GET", c.url+"/api/v1/chat/conversations", c.chat, nil).decode(t, &list)
		if len(list.Conversations) != 0 {
			t.Fatalf("conversations left: %+v", list.Conversations)
		}
	})
	t.Run("retried by the SDK", func(t *testing.T) {
		c.llm.Always(llmtest.Text("unused"))
		for _, stream := range []string{"false", "true"} {
			c.llm.Enqueue(llmtest.RateLimited("1"), llmtest.Text("after the wait"))
			got := runNodeOpenAI(t, c, `{"maxRetries":1,"stream":`+stream+`}`)
			if got.Text != "after the wait" || got.Status != 0 {
				t.Fatalf("stream %s: %+v", stream, got)
			}
		}
	})
	t.Run("cut short", func(t *testing.T) {
		c.llm.Always(llmtest.CutShort("The answer is"))
		got := runNodeOpenAI(t, c, `{"maxRetries":2}`)
		if got.Status != http.StatusGatewayTimeout || got.Text != "" || !strings.Contains(got.Message, "ended before the answer") {
			t.Fatalf("a reply cut short: %+v", got)
		}
		// Streamed, the text so far went out: the stream then ends in an
		// error frame, which the SDK throws.
		got = runNodeOpenAI(t, c, `{"maxRetries":2,"stream":true}`)
		if got.Name != "APIError" || !strings.Contains(got.Message, "ended before the answer") {
			t.Fatalf("a stream cut short: %+v", got)
		}
	})
	// The SDK's AbortController during a tool call: the turn is cancelled,
	// the running call with it, and neither the model nor another tool is
	// called after.
	t.Run("client aborts", func(t *testing.T) {
		c.llm.Always(llmtest.ToolCalls(llmtest.Call("tm__echo", `{"message":"after the abort"}`)))
		c.llm.Enqueue(llmtest.ToolCalls(llmtest.Call("tm__sleep", `{"ms":30000}`)))
		before := c.llm.Attempts()
		got := runNodeOpenAI(t, c, `{"stream":true,"abortAfter":2000}`)
		// The SDK ends an aborted stream's iteration quietly.
		if got.Status != 0 || got.Conversation == "" || got.Text != "" {
			t.Fatalf("an aborted stream: %+v", got)
		}
		var hist model.ChatHistoryReply
		testkit.WaitFor(t, 15*time.Second, func() (bool, string) {
			httpDo(t, "GET", c.url+"/api/v1/chat/conversations/"+got.Conversation, c.chat, nil).decode(t, &hist)
			last := hist.Entries[len(hist.Entries)-1]
			return last.Kind == model.EntryTurnEnd, "the turn goes on"
		})
		if last := hist.Entries[len(hist.Entries)-1]; !bytes.Contains(last.Payload, []byte(`"reason":"cancelled"`)) {
			t.Fatalf("the turn ended %s", last.Payload)
		}
		for _, e := range hist.Entries {
			if e.Kind == model.EntryToolResult {
				t.Fatalf("a call ran to its end after the abort: %s", e.Payload)
			}
		}
		if n := c.llm.Attempts() - before; n != 1 {
			t.Fatalf("the model was asked %d times, want once (before the abort)", n)
		}
	})
	// OpenAI's 429 of a spent quota does not pass with time: neither the
	// chat nor the SDK waits it out, and the client reads why.
	t.Run("quota spent", func(t *testing.T) {
		c.llm.Always(llmtest.QuotaSpent())
		before := c.llm.Attempts()
		got := runNodeOpenAI(t, c, `{"maxRetries":2}`)
		if got.Status != http.StatusTooManyRequests || !strings.Contains(got.Message, "exceeded your current quota") ||
			got.Seconds > 5 || c.llm.Attempts()-before != 1 {
			t.Fatalf("a spent quota: %+v, %d model requests", got, c.llm.Attempts()-before)
		}
	})
	t.Run("huge body", func(t *testing.T) {
		before := c.llm.Attempts()
		got := runNodeOpenAI(t, c, `{"maxRetries":2,"big":2000000}`)
		if got.Status != http.StatusRequestEntityTooLarge || !strings.Contains(got.Message, "larger than the limit") || c.llm.Attempts() != before {
			t.Fatalf("a 2 MB request: %+v", got)
		}
	})
	// A provider's 5xx on the first step: nothing ran, so the SDK's own
	// retry of 5xx is left to work.
	t.Run("unavailable", func(t *testing.T) {
		c.llm.Always(llmtest.Error(http.StatusServiceUnavailable))
		before := c.llm.Attempts()
		got := runNodeOpenAI(t, c, `{"maxRetries":2}`)
		if got.Status != http.StatusServiceUnavailable || got.Name != "InternalServerError" || c.llm.Attempts()-before != 3 {
			t.Fatalf("an upstream 503: %+v, %d model requests, want 3 (the SDK's 2 retries)", got, c.llm.Attempts()-before)
		}
		c.llm.Always(llmtest.Text("after the retry"))
		for _, stream := range []string{"false", "true"} {
			c.llm.Enqueue(llmtest.Error(http.StatusInternalServerError))
			if got := runNodeOpenAI(t, c, `{"maxRetries":1,"stream":`+stream+`}`); got.Text != "after the retry" {
				t.Fatalf("stream %s: an upstream 500 once: %+v", stream, got)
			}
		}
	})
}

// TestOpenAIClientTimeout: a turn longer than the openai SDK's timeout. The
// SDK retries a request it timed out (it never saw X-Should-Retry: false),
// which would run the turn, tools included, again. The gateway reads the
// timeout the SDK announces (X-Stainless-Timeout, for a request's own
// timeout): a completion is answered 504 before it, without retry, and a
// stream opens before it.
func TestOpenAIClientTimeout(t *testing.T) {
	t.Parallel()
	// The gateway's own keep-alive interval (15 s), longer than the client's timeout.
	c := startChatWith(t, gateway.Options{})
	c.putProfile(t, "assistant", nil)

	t.Run("not streamed", func(t *testing.T) {
		c.llm.Always(llmtest.Slow(llmtest.Text("a slow answer"), 2*time.Second))
		before := c.llm.Attempts()
		got := runNodeOpenAI(t, c, `{"maxRetries":2,"timeout":3000}`)
		if got.Status != http.StatusGatewayTimeout || got.Seconds > 3 {
			t.Fatalf("a turn past the client's timeout: %+v", got)
		}
		if n := c.llm.Attempts() - before; n != 1 {
			t.Fatalf("the model was asked %d times: the turn ran again", n)
		}
	})
	t.Run("streamed", func(t *testing.T) {
		c.llm.Always(llmtest.Slow(llmtest.Text("a slow answer"), 2*time.Second))
		before := c.llm.Attempts()
		got := runNodeOpenAI(t, c, `{"maxRetries":2,"timeout":3000,"stream":true}`)
		if got.Text != "a slow answer" || got.Status != 0 {
			t.Fatalf("a stream slower than the client's timeout: %+v", got)
		}
		if n := c.llm.Attempts() - before; n != 1 {
			t.Fatalf("the model was asked %d times: the turn ran again", n)
		}
	})
}
