package chat

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// env is a bus with a runner serving the go-sdk test server "tm", a local
// model server and a caller's connection.
type env struct {
	rt  *runnertest.Env
	llm *llmtest.Server
	nc  *nats.Conn
	// bin is the test server's binary.
	bin string
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newEnv(t *testing.T) *env {
	t.Helper()
	if testing.Short() {
		t.Skip("runs a runner with a test MCP server")
	}
	bin, cleanup, err := runnertest.BuildTestServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	rt := runnertest.Start(t, runner.Options{StopGrace: 100 * time.Millisecond, StopTimeout: 2 * time.Second,
		StartTimeout: 10 * time.Second, Logger: quiet()})
	rt.Put(t, runnertest.Binary("tm", bin, "-name", "tm"))
	rt.WaitState(t, "tm", model.StateRunning, 15*time.Second)
	return &env{rt: rt, llm: llmtest.Start(t, ""), nc: rt.NC, bin: bin}
}

// startService runs a chat service instance until the returned stop.
func (e *env) startService(t *testing.T, leaseTTL time.Duration) (*Service, context.CancelFunc) {
	t.Helper()
	return e.startServiceOpts(t, leaseTTL, Options{})
}

// startServiceOpts is startService with more options.
func (e *env) startServiceOpts(t *testing.T, leaseTTL time.Duration, o Options) (*Service, context.CancelFunc) {
	t.Helper()
	nc, err := e.rt.NS.Connect()
	if err != nil {
		t.Fatal(err)
	}
	return e.startServiceOn(t, nc, leaseTTL, o)
}

// startServiceOn is startServiceOpts on the connection nc.
func (e *env) startServiceOn(t *testing.T, nc *nats.Conn, leaseTTL time.Duration, o Options) (*Service, context.CancelFunc) {
	t.Helper()
	t.Cleanup(nc.Close)
	o.Logger, o.LeaseTTL, o.CallTimeout = quiet(), leaseTTL, 10*time.Second
	s, err := New(nc, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("chat service: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("the chat service did not stop within 15s")
		}
	}
	t.Cleanup(stop)
	select {
	case <-s.Ready():
	case err := <-done:
		t.Fatalf("chat service: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("the chat service is not ready after 20s")
	}
	return s, stop
}

// req sends a request on mcp.v1.chat.<verb>; the error is the reply's.
func (e *env) req(t *testing.T, verb string, in, out any) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return bus.RequestJSON(ctx, e.nc, bus.NewSubjects("").Service("chat", verb), in, out, 20*time.Second)
}

func (e *env) putProfile(t *testing.T, p model.Profile) {
	t.Helper()
	var got model.Profile
	if err := e.req(t, "profiles.put", model.ChatProfilePutRequest{Profile: p}, &got); err != nil {
		t.Fatalf("profiles.put: %v", err)
	}
}

// follow collects a conversation's events.
type follow struct {
	mu  sync.Mutex
	evs []model.ChatEvent
}

func (e *env) follow(t *testing.T, conv string) *follow {
	t.Helper()
	f := &follow{}
	sub, err := e.nc.Subscribe(bus.NewSubjects("").Event("chat", conv), func(m *nats.Msg) {
		var ev model.ChatEvent
		if json.Unmarshal(m.Data, &ev) == nil {
			f.mu.Lock()
			f.evs = append(f.evs, ev)
			f.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return f
}

// done waits for the n-th done event.
func (f *follow) done(t *testing.T, n int, within time.Duration) model.ChatDone {
	t.Helper()
	var d model.ChatDone
	testkit.WaitFor(t, within, func() (bool, string) {
		f.mu.Lock()
		defer f.mu.Unlock()
		seen := 0
		for _, ev := range f.evs {
			if ev.Kind == model.ChatEventDone {
				if seen++; seen == n {
					d = *ev.Done
					return true, ""
				}
			}
		}
		return false, "no done event yet"
	})
	return d
}

func (f *follow) toolStates() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, ev := range f.evs {
		if ev.Kind == model.ChatEventToolCall {
			out = append(out, ev.ToolCall.Tool+":"+ev.ToolCall.State)
		}
	}
	return out
}

func codeOf(err error) apierr.Code { return apierr.Of(err) }

func TestSendBadInputChangesNothing(t *testing.T) {
	e := newEnv(t)
	e.startService(t, 0)
	e.putProfile(t, model.Profile{Name: "nokey", Provider: model.ChatProviderOpenAI, Model: "m"})
	cases := []struct {
		name  string
		req   model.ChatSendRequest
		code  apierr.Code
		field string
	}{
		{"unknown profile", model.ChatSendRequest{Conversation: "c1", Profile: "nobody", Message: "hi"}, apierr.NotFound, ""},
		{"no api key", model.ChatSendRequest{Conversation: "c1", Profile: "nokey", Message: "hi"}, apierr.Validation, "profile"},
		{"empty message", model.ChatSendRequest{Conversation: "c1", Profile: "nokey", Message: "  "}, apierr.Validation, "message"},
		{"new conversation without profile", model.ChatSendRequest{Conversation: "c1", Message: "hi"}, apierr.Validation, "profile"},
		{"bad conversation id", model.ChatSendRequest{Conversation: "a.b", Profile: "nokey", Message: "hi"}, apierr.Validation, "conversation"},
		{"bad context role", model.ChatSendRequest{Conversation: "c1", Profile: "nokey", Message: "hi",
			Context: []model.ChatContextMessage{{Role: "tool", Content: "x"}}}, apierr.Validation, "context.0.role"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var reply model.ChatSendReply
			err := e.req(t, "send", c.req, &reply)
			var ae *apierr.Error
			if err == nil || codeOf(err) != c.code {
				t.Fatalf("send = %+v, %v; want %s", reply, err, c.code)
			}
			if ae = apierr.From(err); c.field != "" && ae.Field != c.field {
				t.Errorf("field = %q, want %q (%s)", ae.Field, c.field, ae.Message)
			}
		})
	}
	if n := len(e.llm.Requests()); n != 0 {
		t.Errorf("the model was asked %d times; bad input must stop before any request", n)
	}
	err := e.req(t, "history", model.ChatHistoryRequest{Conversation: "c1"}, &model.ChatHistoryReply{})
	if codeOf(err) != apierr.NotFound {
		t.Errorf("history of c1 after only bad requests: %v, want NOT_FOUND (nothing written)", err)
	}
}

func TestConversationOverTheBus(t *testing.T) {
	e := newEnv(t)
	e.startService(t, 0)
	e.putProfile(t, model.Profile{Name: "local", Provider: model.ChatProviderOpenAI, Model: "m", BaseURL: e.llm.OpenAIBaseURL(),
		ToolFilter: model.ChatToolFilter{Include: []string{"tm__*"}}})
	e.llm.Enqueue(llmtest.ToolCalls(llmtest.Call("tm__echo", `{"message":"over the bus"}`)), llmtest.Text("it said: over the bus"),
		llmtest.Text("second answer"))
	f := e.follow(t, "conv-1")
	var sent model.ChatSendReply
	if err := e.req(t, "send", model.ChatSendRequest{Conversation: "conv-1", Profile: "local", Message: "echo something"}, &sent); err != nil {
		t.Fatal(err)
	}
	if sent.Conversation != "conv-1" || sent.Turn == "" || sent.Events != "mcp.v1.events.chat.conv-1" {
		t.Errorf("send reply = %+v", sent)
	}
	if d := f.done(t, 1, 30*time.Second); d.Reason != model.TurnFinal || d.Message != "it said: over the bus" || d.Steps != 2 {
		t.Errorf("done = %+v", d)
	}
	if got := f.toolStates(); len(got) != 2 || got[0] != "tm__echo:started" || got[1] != "tm__echo:completed" {
		t.Errorf("tool-call events = %v, want started then completed", got)
	}
	// The next message continues with the conversation's profile.
	if err := e.req(t, "send", model.ChatSendRequest{Conversation: "conv-1", Message: "and again"}, &sent); err != nil {
		t.Fatal(err)
	}
	if d := f.done(t, 2, 30*time.Second); d.Message != "second answer" {
		t.Errorf("second done = %+v", d)
	}
	var h model.ChatHistoryReply
	if err := e.req(t, "history", model.ChatHistoryRequest{Conversation: "conv-1"}, &h); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, en := range h.Entries {
		kinds = append(kinds, en.Kind)
	}
	want := []string{model.EntryUserMessage, model.EntryModelStep, model.EntryToolResult, model.EntryModelStep, model.EntryTurnEnd,
		model.EntryUserMessage, model.EntryModelStep, model.EntryTurnEnd}
	if !slices.Equal(kinds, want) {
		t.Errorf("history = %v, want %v", kinds, want)
	}
	var list model.ChatListReply
	if err := e.req(t, "list", model.ChatListRequest{}, &list); err != nil || len(list.Conversations) != 1 || list.Conversations[0].Conversation != "conv-1" {
		t.Errorf("list = %+v, %v", list, err)
	}
	var del model.ChatConversationRef
	if err := e.req(t, "delete", model.ChatDeleteRequest{Conversation: "conv-1"}, &del); err != nil {
		t.Fatal(err)
	}
	if err := e.req(t, "history", model.ChatHistoryRequest{Conversation: "conv-1"}, &h); codeOf(err) != apierr.NotFound {
		t.Errorf("history after delete: %v, want NOT_FOUND", err)
	}
}

func TestBusyConversationAndCancel(t *testing.T) {
	e := newEnv(t)
	e.startService(t, 0)
	e.putProfile(t, model.Profile{Name: "slow", Provider: model.ChatProviderOpenAI, Model: "m", BaseURL: e.llm.OpenAIBaseURL()})
	e.llm.Enqueue(llmtest.Slow(llmtest.Text("too late"), time.Minute), llmtest.Text("after the cancel"))
	f := e.follow(t, "busy")
	var sent model.ChatSendReply
	if err := e.req(t, "send", model.ChatSendRequest{Conversation: "busy", Profile: "slow", Message: "think hard"}, &sent); err != nil {
		t.Fatal(err)
	}
	err := e.req(t, "send", model.ChatSendRequest{Conversation: "busy", Message: "are you there?"}, &model.ChatSendReply{})
	if codeOf(err) != apierr.Conflict {
		t.Fatalf("a second send while a turn runs: %v, want CONFLICT", err)
	}
	// The slow reply is the first turn's (else the next turn would get it).
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) { return len(e.llm.Requests()) == 1, "the model is not asked yet" })
	start := time.Now()
	var c model.ChatCancelReply
	if err := e.req(t, "cancel", model.ChatCancelRequest{Conversation: "busy"}, &c); err != nil {
		t.Fatal(err)
	}
	if c.Turn != sent.Turn || c.Done == nil || c.Done.Reason != model.TurnCancelled {
		t.Errorf("cancel = %+v, want turn %s cancelled", c, sent.Turn)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("cancel took %s", took)
	}
	if d := f.done(t, 1, 5*time.Second); d.Reason != model.TurnCancelled {
		t.Errorf("done = %+v", d)
	}
	// The lease is released: the conversation takes a new turn.
	testkit.WaitFor(t, 5*time.Second, func() (bool, string) {
		err := e.req(t, "send", model.ChatSendRequest{Conversation: "busy", Message: "again"}, &sent)
		return err == nil, "send after cancel: " + errString(err)
	})
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		var h model.ChatHistoryReply
		_ = e.req(t, "history", model.ChatHistoryRequest{Conversation: "busy"}, &h)
		for _, en := range h.Entries {
			t.Logf("%d %s %s %s", en.Seq, en.Kind, en.Turn, en.Payload)
		}
		t.Logf("model requests: %d, pending replies %d; events %+v", len(e.llm.Requests()), e.llm.Pending(), f.evs)
	})
	if d := f.done(t, 2, 30*time.Second); d.Message != "after the cancel" {
		t.Errorf("done after cancel = %+v", d)
	}
	// Nothing running: cancel answers without a turn.
	var idle model.ChatCancelReply
	if err := e.req(t, "cancel", model.ChatCancelRequest{Conversation: "busy"}, &idle); err != nil || idle.Done != nil || idle.Turn != "" {
		t.Errorf("cancel with nothing running = %+v, %v", idle, err)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestStoppedInstanceHandsOver: an instance that stops mid-turn leaves the
// turn unended and hands its lease over; another resumes it.
func TestStoppedInstanceHandsOver(t *testing.T) {
	e := newEnv(t)
	a, stopA := e.startService(t, time.Second)
	b, stopB := e.startService(t, time.Second)
	e.putProfile(t, model.Profile{Name: "p", Provider: model.ChatProviderOpenAI, Model: "m", BaseURL: e.llm.OpenAIBaseURL()})
	e.llm.Enqueue(llmtest.Slow(llmtest.Text("never"), time.Minute), llmtest.Text("resumed"))
	f := e.follow(t, "handover")
	if err := e.req(t, "send", model.ChatSendRequest{Conversation: "handover", Profile: "p", Message: "go"}, &model.ChatSendReply{}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) { return len(e.llm.Requests()) == 1, "the model is not asked yet" })
	stop := stopB
	if a.drives("handover") {
		stop = stopA
	} else if !b.drives("handover") {
		t.Fatal("no instance drives the turn")
	}
	stop()
	if d := f.done(t, 1, 15*time.Second); d.Reason != model.TurnFinal || d.Message != "resumed" {
		t.Errorf("done = %+v", d)
	}
	var h model.ChatHistoryReply
	if err := e.req(t, "history", model.ChatHistoryRequest{Conversation: "handover"}, &h); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, en := range h.Entries {
		kinds = append(kinds, en.Kind)
	}
	if len(kinds) != 3 || kinds[0] != model.EntryUserMessage || kinds[1] != model.EntryModelStep || kinds[2] != model.EntryTurnEnd {
		t.Errorf("log = %v, want user_message, model_step, turn_end (the stop wrote nothing)", kinds)
	}
}

// TestCancelRightAfterSend: a cancellation that arrives before the loop has
// read the log still ends the turn at once, never leaving it to a takeover.
func TestCancelRightAfterSend(t *testing.T) {
	e := newEnv(t)
	e.startService(t, 0)
	e.putProfile(t, model.Profile{Name: "slow", Provider: model.ChatProviderOpenAI, Model: "m", BaseURL: e.llm.OpenAIBaseURL()})
	e.llm.Always(llmtest.Slow(llmtest.Text("too late"), time.Minute))
	for i := range 8 {
		conv := "early-" + string(rune('a'+i))
		if err := e.req(t, "send", model.ChatSendRequest{Conversation: conv, Profile: "slow", Message: "go"}, &model.ChatSendReply{}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var c model.ChatCancelReply
		if err := e.req(t, "cancel", model.ChatCancelRequest{Conversation: conv}, &c); err != nil {
			t.Fatalf("cancel %s: %v", conv, err)
		}
		if c.Done == nil || c.Done.Reason != model.TurnCancelled {
			t.Errorf("cancel %s = %+v", conv, c)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("cancel %s took %s", conv, took)
		}
	}
}

// TestTaskCallSurvivesInstance: a tool call run as a task outlives the
// instance that started it; the instance resuming the turn reads the task's
// result instead of calling the tool again, so the tool runs once.
func TestTaskCallSurvivesInstance(t *testing.T) {
	e := newEnv(t)
	runs := filepath.Join(t.TempDir(), "runs")
	cfg := runnertest.Binary("slow", e.bin, "-name", "slow")
	cfg.EnvVars = map[string]model.EnvVar{"TESTMCP_RUN_FILE": {Value: runs}}
	e.rt.Put(t, cfg)
	e.rt.WaitState(t, "slow", model.StateRunning, 15*time.Second)
	opts := Options{TaskTools: []string{"slow__*"}}
	a, stopA := e.startServiceOpts(t, time.Second, opts)
	b, stopB := e.startServiceOpts(t, time.Second, opts)
	e.putProfile(t, model.Profile{Name: "p", Provider: model.ChatProviderOpenAI, Model: "m", BaseURL: e.llm.OpenAIBaseURL()})
	e.llm.Enqueue(llmtest.ToolCalls(llmtest.Call("slow__sleep", `{"ms":4000}`)), llmtest.Text("rested"))
	f := e.follow(t, "tasked")
	if err := e.req(t, "send", model.ChatSendRequest{Conversation: "tasked", Profile: "p", Message: "rest"}, &model.ChatSendReply{}); err != nil {
		t.Fatal(err)
	}
	runCount := func() int {
		data, _ := os.ReadFile(runs)
		return strings.Count(string(data), "\n")
	}
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) { return runCount() == 1, "the tool has not started" })
	// The task's id is in the log (startTask): stopped before that, the
	// instance cancels the task it could not record and the next one calls
	// the tool again, by design. The tool may start before the entry lands.
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
		var h model.ChatHistoryReply
		if err := e.req(t, "history", model.ChatHistoryRequest{Conversation: "tasked"}, &h); err != nil {
			return false, err.Error()
		}
		for _, en := range h.Entries {
			if en.Kind == model.EntryToolCall {
				return true, ""
			}
		}
		return false, "the task is not in the log yet"
	})
	stop := stopB
	if a.drives("tasked") {
		stop = stopA
	} else if !b.drives("tasked") {
		t.Fatal("no instance drives the turn")
	}
	stop()
	if d := f.done(t, 1, 20*time.Second); d.Reason != model.TurnFinal || d.Message != "rested" {
		t.Fatalf("done = %+v", d)
	}
	if n := runCount(); n != 1 {
		t.Errorf("the tool ran %d times, want once", n)
	}
	if body := string(e.llm.Last().Body); !strings.Contains(body, "slept 4000ms") {
		t.Errorf("the task's result did not reach the model: %s", body)
	}
	var h model.ChatHistoryReply
	if err := e.req(t, "history", model.ChatHistoryRequest{Conversation: "tasked"}, &h); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	var task string
	for _, en := range h.Entries {
		kinds = append(kinds, en.Kind)
		if en.Kind == model.EntryToolCall {
			var tt struct {
				TaskID string `json:"task_id"`
			}
			_ = json.Unmarshal(en.Payload, &tt)
			task = tt.TaskID
		}
	}
	want := []string{model.EntryUserMessage, model.EntryModelStep, model.EntryToolCall, model.EntryToolResult, model.EntryModelStep, model.EntryTurnEnd}
	if !slices.Equal(kinds, want) || task == "" {
		t.Fatalf("log = %v (task %q), want %v with the task's id", kinds, task, want)
	}
	got, err := client.New(e.nc, client.Options{}).Task(context.Background(), task)
	if err != nil || got.State != model.TaskCompleted || got.Attempts != 1 {
		t.Errorf("task %s: %+v, %v; want completed after one attempt", task, got, err)
	}
}
