package gateway

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/services/gateway/rest"
)

// modelKey is the local model server's API key: the chat service only gets
// it through a profile PUT over HTTP, sealed by the gateway.
const modelKey = "sk-model-secret-7f3a"

// chatEnv is the whole system with its gateway, the go-sdk test server "tm"
// running (tools tm__echo, tm__sleep…), a local model server (llmtest)
// answering only modelKey, and a chat-scoped API key.
type chatEnv struct {
	*mcpEnv
	llm  *llmtest.Server
	chat string // a key with the chat scope only
}

func startChat(t *testing.T) *chatEnv {
	t.Helper()
	return startChatWith(t, gateway.Options{EventHeartbeat: 500 * time.Millisecond})
}

// startChatWith is startChat with the gateway's options gw.
func startChatWith(t *testing.T, gw gateway.Options) *chatEnv {
	t.Helper()
	e := startMCP(t, gw)
	e.enable(t, testServerConfig("tm"))
	c := &chatEnv{mcpEnv: e, llm: llmtest.Start(t, modelKey)}
	c.chat = e.createKey(t, model.KeyCreateRequest{Name: "chat app", Scopes: []string{model.KeyScopeChat}}).Key
	return c
}

// putProfile creates the profile name on the local model server, its API key
// given over HTTP; edit changes the body first.
func (c *chatEnv) putProfile(t *testing.T, name string, edit func(*rest.ProfilePutBody)) model.Profile {
	t.Helper()
	body := rest.ProfilePutBody{Profile: model.Profile{Provider: model.ChatProviderOpenAI, Model: "test-model",
		BaseURL: c.llm.OpenAIBaseURL()}, APIKey: modelKey}
	if edit != nil {
		edit(&body)
	}
	r := httpDo(t, "PUT", c.url+"/api/v1/chat/profiles/"+name, c.admin, body)
	if r.status != http.StatusOK {
		t.Fatalf("PUT profile %s: %d %s", name, r.status, r.body)
	}
	var p model.Profile
	r.decode(t, &p)
	return p
}

// sseFrame is one Server-Sent Event.
type sseFrame struct {
	id, event, data string
}

// sseStream reads a gateway event stream on its own goroutine.
type sseStream struct {
	frames chan sseFrame
}

// openSSE opens url with key and returns once the gateway said it is
// connected (its consumer exists: no later event is missed).
func openSSE(t *testing.T, url, key string) *sseStream {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t, 3*time.Minute), "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	s := &sseStream{frames: make(chan sseFrame, 1024)}
	connected := make(chan struct{})
	go func() {
		defer close(s.frames)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		var f sseFrame
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == ": connected":
				close(connected)
			case line == "":
				if f.data != "" {
					s.frames <- f
				}
				f = sseFrame{}
			case strings.HasPrefix(line, "id: "):
				f.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				f.event = line[7:]
			case strings.HasPrefix(line, "data: "):
				f.data = line[6:]
			}
		}
	}()
	select {
	case <-connected:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: no ': connected' within 20s", url)
	}
	return s
}

// until reads chat events until stop says so, and returns them all.
func (s *sseStream) until(t *testing.T, within time.Duration, stop func(model.ChatEvent) bool) []model.ChatEvent {
	t.Helper()
	var got []model.ChatEvent
	deadline := time.After(within)
	for {
		select {
		case f, ok := <-s.frames:
			if !ok {
				t.Fatalf("the event stream ended; events so far: %+v", got)
			}
			var ev model.ChatEvent
			if err := json.Unmarshal([]byte(f.data), &ev); err != nil {
				t.Fatalf("frame %+v: %v", f, err)
			}
			if f.event != ev.Kind || f.id == "" {
				t.Fatalf("frame event %q id %q for an event of kind %q", f.event, f.id, ev.Kind)
			}
			got = append(got, ev)
			if stop(ev) {
				return got
			}
		case <-deadline:
			t.Fatalf("no matching event within %s; events so far: %+v", within, got)
		}
	}
}

// isDone stops at the end of a turn.
func isDone(ev model.ChatEvent) bool { return ev.Kind == model.ChatEventDone }

// toolStates are the states of the tool_call events, in order.
func toolStates(evs []model.ChatEvent) []string {
	var out []string
	for _, ev := range evs {
		if ev.ToolCall != nil {
			out = append(out, ev.ToolCall.Tool+":"+ev.ToolCall.State)
		}
	}
	return out
}
