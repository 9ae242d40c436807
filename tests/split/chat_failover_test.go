package split

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
)

// TestChatTurnSurvivesSIGKILL: two chat service processes share the work; the
// one driving a turn is killed (SIGKILL) while it waits for the model's
// second step, after its tool call completed. The other resumes the turn from
// the log: the turn ends with the model's answer, the tool ran once, every
// step is in the log once, in order.
func TestChatTurnSurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server and seven mcpbus processes")
	}
	si := startStandIns(t)
	d := startSplitEnv(t, si, map[string][]string{"chat": {"MCPBUS_CHAT_LEASE_TTL=3s"}})
	defer d.stop(t)
	ids := filepath.Join(d.dataDir, "nats")
	second := d.startEnv(t, "chat-2", []string{"MCPBUS_CHAT_LEASE_TTL=3s"}, mcpbusBin, "serve", "chat",
		"--nats-nkey", filepath.Join(ids, "chat.nk"), "--nats", d.natsURL, "--data-dir", d.dataDir, "--log-level", "debug")
	second.WaitLog(t, `"msg":"service ready"`, 30*time.Second)
	chats := []*testkit.Proc{second}
	for _, p := range d.procs {
		if p.Name() == "chat" {
			chats = append(chats, p)
		}
	}
	if len(chats) != 2 {
		t.Fatalf("want two chat processes, have %d", len(chats))
	}

	if r := d.cli(t, "", "servers", "add", serverName, "--binary", testServer, "--arg", "-name", "--arg", serverName, "--json"); r.Code != 0 {
		t.Fatalf("servers add: %s", r)
	}
	if r := d.cli(t, "", "servers", "enable", serverName, "--json"); r.Code != 0 {
		t.Fatalf("servers enable: %s", r)
	}
	d.waitState(t, model.StateRunning, 30*time.Second)

	llm := llmtest.Start(t, "")
	tool := serverName + "__echo"
	llm.Enqueue(
		llmtest.ToolCalls(llmtest.Call(tool, `{"message":"before the crash"}`)),
		llmtest.Slow(llmtest.Text("the killed instance never sends this"), time.Minute),
		llmtest.Text("done after the takeover"),
	)

	nc := operatorConn(t, d)
	var profile model.Profile
	request(t, nc, "mcp.v1.chat.profiles.put", model.ChatProfilePutRequest{Profile: model.Profile{
		Name: "failover", Provider: model.ChatProviderOpenAI, Model: "test-model", BaseURL: llm.OpenAIBaseURL()}}, &profile)

	const conv = "failover-conversation"
	var mu sync.Mutex
	var done []model.ChatDone
	sub, err := nc.Subscribe("mcp.v1.events.chat."+conv, func(m *nats.Msg) {
		var ev model.ChatEvent
		if json.Unmarshal(m.Data, &ev) == nil && ev.Kind == model.ChatEventDone {
			mu.Lock()
			done = append(done, *ev.Done)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	var sent model.ChatSendReply
	request(t, nc, "mcp.v1.chat.send", model.ChatSendRequest{Conversation: conv, Profile: "failover", Message: "call the tool, then answer"}, &sent)

	// The driver has run the tool and waits for the slow second step.
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
		return len(llm.Requests()) >= 2, fmt.Sprintf("%d model requests", len(llm.Requests()))
	})
	var driver, other *testkit.Proc
	for i, p := range chats {
		data, _ := os.ReadFile(p.Log())
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, `"msg":"chat: driving a turn"`) && strings.Contains(line, `"conversation":"`+conv+`"`) {
				driver, other = p, chats[1-i]
			}
		}
	}
	if driver == nil {
		t.Fatal("no chat process logged that it drives the turn")
	}
	before := history(t, nc, conv)
	if n := countKind(before, model.EntryToolResult); n != 1 {
		t.Fatalf("before the kill the log has %d tool results, want 1: %+v", n, before)
	}
	driver.Kill(t)
	start := time.Now()

	testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(done) > 0, "no done event yet"
	})
	t.Logf("the turn ended %s after the kill", time.Since(start).Round(time.Millisecond))
	other.WaitLog(t, "chat: resuming a turn whose instance stopped", time.Second)
	mu.Lock()
	got := done[0]
	mu.Unlock()
	if got.Reason != model.TurnFinal || got.Message != "done after the takeover" || got.Steps != 2 {
		t.Errorf("done = %+v, want final 'done after the takeover' in 2 steps", got)
	}

	after := history(t, nc, conv)
	for i, e := range after {
		if e.Seq != uint64(i+1) {
			t.Errorf("entry %d has seq %d: the log has a gap or a repeat", i, e.Seq)
		}
		if e.Turn != sent.Turn {
			t.Errorf("entry %d belongs to turn %s, want %s", i, e.Turn, sent.Turn)
		}
	}
	want := []string{model.EntryUserMessage, model.EntryModelStep, model.EntryToolResult, model.EntryModelStep, model.EntryTurnEnd}
	var kinds []string
	for _, e := range after {
		kinds = append(kinds, e.Kind)
	}
	if strings.Join(kinds, ",") != strings.Join(want, ",") {
		t.Errorf("the log is %v, want %v", kinds, want)
	}
	// The tool ran once: the resumed step saw exactly one result of it.
	last := llm.Last()
	if n := strings.Count(string(last.Body), "before the crash"); n != 2 { // the call's arguments and its result
		t.Errorf("the resumed model request carries the call and its result %d times, want 2:\n%s", n, last.Body)
	}
	if n := len(llm.Requests()); n != 3 {
		t.Errorf("the model was asked %d times, want 3 (tool step, the killed slow step, the resumed step)", n)
	}
}

// operatorConn connects to the deployment's NATS as the operator (the CLI's identity).
func operatorConn(t *testing.T, d *deployment) *nats.Conn {
	t.Helper()
	opt, err := nats.NkeyOptionFromSeed(filepath.Join(d.dataDir, "nats", "operator.nk"))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(d.natsURL, opt, nats.CustomInboxPrefix("_I.operator"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// request sends a JSON request and decodes the reply, failing on an error reply.
func request(t *testing.T, nc *nats.Conn, subject string, in, out any) {
	t.Helper()
	data, _ := json.Marshal(in)
	msg, err := nc.Request(subject, data, 20*time.Second)
	if err != nil {
		t.Fatalf("%s: %v", subject, err)
	}
	if code := msg.Header.Get("Nats-Service-Error-Code"); code != "" {
		t.Fatalf("%s answered %s: %s", subject, code, msg.Data)
	}
	if err := json.Unmarshal(msg.Data, out); err != nil {
		t.Fatalf("%s: %v: %s", subject, err, msg.Data)
	}
}

func history(t *testing.T, nc *nats.Conn, conv string) []model.ChatEntry {
	t.Helper()
	var h model.ChatHistoryReply
	request(t, nc, "mcp.v1.chat.history", model.ChatHistoryRequest{Conversation: conv}, &h)
	return h.Entries
}

func countKind(entries []model.ChatEntry, kind string) int {
	n := 0
	for _, e := range entries {
		if e.Kind == kind {
			n++
		}
	}
	return n
}
