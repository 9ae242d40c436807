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

// TestChatTaskSurvivesSIGKILL: the chat processes run the test server's
// sleep as a durable task (--chat-task-tools), each as the chat identity of
// the deployment's authorization. The process driving a turn is killed
// (SIGKILL) while the task runs; the other resumes the turn, waits for the
// same task and gives its result to the model: one task, one attempt, the
// tool never called again.
func TestChatTaskSurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server and seven mcpbus processes")
	}
	tool := serverName + "__sleep"
	chatEnv := []string{"MCPBUS_CHAT_LEASE_TTL=3s", "MCPBUS_CHAT_TASK_TOOLS=" + tool}
	si := startStandIns(t)
	d := startSplitEnv(t, si, map[string][]string{"chat": chatEnv})
	defer d.stop(t)
	ids := filepath.Join(d.dataDir, "nats")
	second := d.startEnv(t, "chat-2", chatEnv, mcpbusBin, "serve", "chat",
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
	llm.Enqueue(llmtest.ToolCalls(llmtest.Call(tool, `{"ms":8000}`)), llmtest.Text("rested after the takeover"))
	nc := operatorConn(t, d)
	var profile model.Profile
	request(t, nc, "mcp.v1.chat.profiles.put", model.ChatProfilePutRequest{Profile: model.Profile{
		Name: "tasks", Provider: model.ChatProviderOpenAI, Model: "test-model", BaseURL: llm.OpenAIBaseURL()}}, &profile)

	const conv = "task-failover"
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
	request(t, nc, "mcp.v1.chat.send", model.ChatSendRequest{Conversation: conv, Profile: "tasks", Message: "sleep, then answer"}, &sent)

	// The driver has started the task and logged it.
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
		return countKind(history(t, nc, conv), model.EntryToolCall) == 1, "no tool_call entry yet"
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
	driver.Kill(t)
	start := time.Now()
	testkit.WaitFor(t, 45*time.Second, func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(done) > 0, "no done event yet"
	})
	t.Logf("the turn ended %s after the kill", time.Since(start).Round(time.Millisecond))
	other.WaitLog(t, "chat: resuming a turn whose instance stopped", time.Second)
	mu.Lock()
	got := done[0]
	mu.Unlock()
	if got.Reason != model.TurnFinal || got.Message != "rested after the takeover" {
		t.Errorf("done = %+v, want final 'rested after the takeover'", got)
	}
	var kinds []string
	for _, e := range history(t, nc, conv) {
		kinds = append(kinds, e.Kind)
	}
	want := []string{model.EntryUserMessage, model.EntryModelStep, model.EntryToolCall, model.EntryToolResult, model.EntryModelStep, model.EntryTurnEnd}
	if strings.Join(kinds, ",") != strings.Join(want, ",") {
		t.Errorf("the log is %v, want %v", kinds, want)
	}
	if body := string(llm.Last().Body); !strings.Contains(body, "slept 8000ms") {
		t.Errorf("the task's result did not reach the model:\n%s", body)
	}
	var tasks model.TaskListReply
	request(t, nc, "mcp.v1.task.list", model.TaskListRequest{All: true}, &tasks)
	var ours []string
	for _, task := range tasks.Tasks {
		if task.Name == tool {
			ours = append(ours, fmt.Sprintf("%s attempts=%d", task.State, task.Attempts))
		}
	}
	if len(ours) != 1 || ours[0] != "completed attempts=1" {
		t.Errorf("tasks of %s: %v, want one, completed after one attempt", tool, ours)
	}
}
