package gateway

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/access"
	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
)

// TestTasksREST runs a slow tool as a task through the REST API: the handle
// comes at once (202, Location); the gateway that took it is stopped
// mid-task and another one, on the same bus, delivers the result by handle;
// the SSE stream of the task says it completed; a second task is cancelled
// and its server sees the call cancelled; another key's principal sees
// none of it.
func TestTasksREST(t *testing.T) {
	t.Parallel()
	e := start(t)
	mark := filepath.Join(t.TempDir(), "cancelled")
	runs := filepath.Join(t.TempDir(), "runs")
	cfg := model.McpConfig{Name: "slow", Enabled: true,
		Package:   model.Package{Type: model.PackageBinary, Identifier: testServer},
		Transport: model.Transport{Type: model.TransportStdio},
		EnvVars:   map[string]model.EnvVar{"TESTMCP_CANCEL_FILE": {Value: mark}, "TESTMCP_RUN_FILE": {Value: runs}}}
	if r := e.do("POST", "/api/v1/servers", model.ConfigCreateRequest{Config: cfg}); r.status != http.StatusCreated {
		t.Fatalf("create server: %d %s", r.status, r.body)
	}
	e.waitState("slow", model.StateRunning)
	waitTools(t, e, func(names []string) bool { return contains(names, "slow__sleep") })

	begin := time.Now()
	r := e.do("POST", "/api/v1/tasks", `{"name":"slow__sleep","arguments":{"ms":10000}}`)
	var task model.Task
	r.decode(t, &task)
	if r.status != http.StatusAccepted || task.State != model.TaskWorking || r.header.Get("Location") != "/api/v1/tasks/"+task.ID {
		t.Fatalf("POST /api/v1/tasks: %d %s (Location %q)", r.status, r.body, r.header.Get("Location"))
	}
	if d := time.Since(begin); d > 8*time.Second { // of a 10 s call: room for a loaded host
		t.Fatalf("the handle took %s: it must come before the call ends", d)
	}
	if r := e.do("GET", "/api/v1/tasks/"+task.ID+"/result", nil); r.status != http.StatusAccepted {
		t.Fatalf("result while working: %d %s, want 202", r.status, r.body)
	}

	// The gateway goes away mid-task; another one on the same bus answers.
	e.stop()
	e2 := runGateway(t, e.st, "test-gateway-2", e.dir, e.logs, gateway.Options{})
	sse := openSSE(t, e2.url+"/api/v1/tasks/"+task.ID+"/events", e2.admin)
	var done model.Task
	for deadline := time.Now().Add(30 * time.Second); ; {
		r := e2.do("GET", "/api/v1/tasks/"+task.ID+"/result?wait=10s", nil)
		r.decode(t, &done)
		if r.status == http.StatusOK {
			break
		}
		if r.status != http.StatusAccepted || time.Now().After(deadline) {
			t.Fatalf("result: %d %s", r.status, r.body)
		}
	}
	var res struct {
		Content []struct{ Text string } `json:"content"`
	}
	if err := json.Unmarshal(done.Result, &res); err != nil || done.State != model.TaskCompleted || len(res.Content) != 1 || res.Content[0].Text != "slept 10000ms" {
		t.Fatalf("completed task: %+v (%v)", done, err)
	}
	select {
	case f := <-sse.frames:
		var ev model.Task
		if f.event != model.TaskCompleted || json.Unmarshal([]byte(f.data), &ev) != nil || ev.ID != task.ID || ev.Result != nil {
			t.Fatalf("SSE frame: %+v", f)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no SSE frame for the completed task")
	}
	var list struct {
		Tasks []model.Task `json:"tasks"`
	}
	e2.do("GET", "/api/v1/tasks?state=completed", nil).decode(t, &list)
	if len(list.Tasks) != 1 || list.Tasks[0].ID != task.ID || list.Tasks[0].Result != nil {
		t.Fatalf("list: %+v", list)
	}

	// Cancel reaches the server.
	r = e2.do("POST", "/api/v1/tasks", map[string]any{"server": "slow", "tool": "sleep", "arguments": map[string]any{"ms": 60000}})
	var long model.Task
	r.decode(t, &long)
	waitStarted(t, runs, "sleep", 2) // the first task's run, then this one's
	r = e2.do("DELETE", "/api/v1/tasks/"+long.ID, nil)
	var cancelled model.Task
	r.decode(t, &cancelled)
	if r.status != http.StatusOK || cancelled.State != model.TaskCancelled {
		t.Fatalf("DELETE: %d %s", r.status, r.body)
	}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if b, err := os.ReadFile(mark); err == nil && string(b) == "cancelled" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the server never saw the task's call cancelled")
		}
	}
	if r := e2.do("DELETE", "/api/v1/tasks/"+long.ID, nil); r.status != http.StatusConflict {
		t.Fatalf("second DELETE: %d %s, want 409", r.status, r.body)
	}

	// Another key (call scope) sees none of the admin's tasks.
	var key struct {
		Key string `json:"key"`
	}
	kr := e2.do("POST", "/api/v1/keys", map[string]any{"name": "other", "scopes": []string{"call"}})
	kr.decode(t, &key)
	if key.Key == "" {
		t.Fatalf("key: %d %s", kr.status, kr.body)
	}
	other := *e2
	other.admin = key.Key
	if r := other.do("GET", "/api/v1/tasks/"+task.ID, nil); r.status != http.StatusNotFound || r.contract(t).Code != apierr.NotFound {
		t.Fatalf("another key's GET: %d %s, want 404", r.status, r.body)
	}
	other.do("GET", "/api/v1/tasks", nil).decode(t, &list)
	if len(list.Tasks) != 0 {
		t.Fatalf("another key lists %+v", list.Tasks)
	}
	if r := other.do("GET", "/api/v1/tasks/not-a-uuid", nil); r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "uuid") {
		t.Fatalf("bad id: %d %s", r.status, r.body)
	}
}

// TestRevokedKeysTasksCancelled: a task still working when its key is
// revoked is cancelled (it would otherwise run on, or run again after its
// runner died, in the revoked key's name); another key's task goes on.
func TestRevokedKeysTasksCancelled(t *testing.T) {
	t.Parallel()
	e := start(t)
	cfg := model.McpConfig{Name: "slow", Enabled: true,
		Package:   model.Package{Type: model.PackageBinary, Identifier: testServer},
		Transport: model.Transport{Type: model.TransportStdio}}
	if r := e.do("POST", "/api/v1/servers", model.ConfigCreateRequest{Config: cfg}); r.status != http.StatusCreated {
		t.Fatalf("create server: %d %s", r.status, r.body)
	}
	e.waitState("slow", model.StateRunning)
	waitTools(t, e, func(names []string) bool { return contains(names, "slow__sleep") })
	var gone, kept model.KeyCreateReply
	e.do("POST", "/api/v1/keys", model.KeyCreateRequest{Name: "leaving", Scopes: []string{model.KeyScopeCall}}).decode(t, &gone)
	e.do("POST", "/api/v1/keys", model.KeyCreateRequest{Name: "staying", Scopes: []string{model.KeyScopeCall}}).decode(t, &kept)
	start := func(key string) model.Task {
		var task model.Task
		r := e.doKey(key, "POST", "/api/v1/tasks", map[string]any{"name": "slow__sleep", "arguments": map[string]any{"ms": 60000}})
		if r.status != http.StatusAccepted {
			t.Fatalf("POST task: %d %s", r.status, r.body)
		}
		if r.decode(t, &task); task.ID == "" {
			t.Fatalf("POST task: %d %s", r.status, r.body)
		}
		return task
	}
	goneTask, keptTask := start(gone.Key), start(kept.Key)
	if r := e.do("DELETE", "/api/v1/keys/"+gone.ID, nil); r.status != http.StatusOK {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	testkit.WaitFor(t, 15*time.Second, func() (bool, string) {
		time.Sleep(200 * time.Millisecond) // within the admin key's rate
		var task model.Task
		r := e.do("GET", "/api/v1/tasks/"+goneTask.ID, nil)
		r.decode(t, &task)
		return task.State == model.TaskCancelled, "the revoked key's task: " + string(r.body)
	})
	var task model.Task
	r := e.doKey(kept.Key, "GET", "/api/v1/tasks/"+keptTask.ID, nil)
	if r.decode(t, &task); task.State != model.TaskWorking {
		t.Fatalf("the other key's task: %d %s", r.status, r.body)
	}
}

// sseEnds reads the stream's frames until it ends and returns them; the
// stream must end within d.
func sseEnds(t *testing.T, s *sseStream, d time.Duration) []sseFrame {
	t.Helper()
	var got []sseFrame
	for end := time.After(d); ; {
		select {
		case f, ok := <-s.frames:
			if !ok {
				return got
			}
			got = append(got, f)
		case <-end:
			t.Fatalf("the stream is still open %s on, after the frames %+v", d, got)
		}
	}
}

// TestTaskEventsEndWithTheTask: a task's event stream ends after its final
// event, and one opened after the task ended answers its state and ends:
// nothing can follow, and every stream left open counted against the key's
// limit of event streams (here 2) until the client went.
func TestTaskEventsEndWithTheTask(t *testing.T) {
	e := startMCP(t, gateway.Options{MaxEventStreams: 2, EventHeartbeat: 200 * time.Millisecond})
	e.enable(t, testServerConfig("slow"))
	alice := e.createKey(t, model.KeyCreateRequest{Name: "alice", Scopes: []string{"call"}}).Key

	var task model.Task
	r := httpDo(t, "POST", e.url+"/api/v1/tasks", alice, map[string]any{"name": "slow__sleep", "arguments": map[string]any{"ms": 1500}})
	r.decode(t, &task)
	if r.status != http.StatusAccepted {
		t.Fatalf("POST /api/v1/tasks: %d %s", r.status, r.body)
	}
	frames := sseEnds(t, openSSE(t, e.url+"/api/v1/tasks/"+task.ID+"/events", alice), 20*time.Second)
	if n := len(frames); n == 0 || frames[n-1].event != model.TaskCompleted || frames[n-1].id == "" {
		t.Fatalf("frames of the task's stream: %+v, want its completed event last", frames)
	}

	// Opened after the end, more often than the key may hold streams: each
	// answers the state and ends, a client resuming after the final event
	// (which no retained event follows) too.
	for _, query := range []string{"", "?since=" + frames[len(frames)-1].id, ""} {
		frames := sseEnds(t, openSSE(t, e.url+"/api/v1/tasks/"+task.ID+"/events"+query, alice), 10*time.Second)
		var ev model.Task
		if len(frames) != 1 || frames[0].event != model.TaskCompleted || json.Unmarshal([]byte(frames[0].data), &ev) != nil ||
			ev.ID != task.ID || ev.State != model.TaskCompleted || ev.Result != nil {
			t.Fatalf("stream of the ended task: %+v, want its completed state alone", frames)
		}
	}
	// None of them holds a place: the key may still open as many streams
	// as it may hold (openSSE fails on anything but a stream), here of a
	// task still working; cancelled, the task ends them.
	var long model.Task
	httpDo(t, "POST", e.url+"/api/v1/tasks", alice, map[string]any{"name": "slow__sleep", "arguments": map[string]any{"ms": 60000}}).decode(t, &long)
	open := []*sseStream{openSSE(t, e.url+"/api/v1/tasks/"+long.ID+"/events", alice), openSSE(t, e.url+"/api/v1/tasks/"+long.ID+"/events", alice)}
	if r := httpDo(t, "DELETE", e.url+"/api/v1/tasks/"+long.ID, alice, nil); r.status != http.StatusOK {
		t.Fatalf("DELETE: %d %s", r.status, r.body)
	}
	for _, s := range open {
		if frames := sseEnds(t, s, 10*time.Second); len(frames) == 0 || frames[len(frames)-1].event != model.TaskCancelled {
			t.Fatalf("frames of the cancelled task's stream: %+v", frames)
		}
	}
}

// TestTaskEventsEndWhenTheFinalEventIsLost: the runner publishes a task's
// events without waiting for them to be stored; when its final one never
// reaches the events stream (here the stream refuses new messages from
// then on), the task's event stream still ends with the task, from its
// record, instead of staying open for ever.
func TestTaskEventsEndWhenTheFinalEventIsLost(t *testing.T) {
	e := startMCP(t, gateway.Options{EventHeartbeat: 200 * time.Millisecond})
	e.enable(t, testServerConfig("slow"))
	alice := e.createKey(t, model.KeyCreateRequest{Name: "alice", Scopes: []string{"call"}}).Key
	nc, err := e.st.ConnectAs("test-gateway-stream-admin", access.Gateway) // may update the events stream
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, time.Minute)

	var task model.Task
	r := httpDo(t, "POST", e.url+"/api/v1/tasks", alice, map[string]any{"name": "slow__sleep", "arguments": map[string]any{"ms": 3000}})
	if r.decode(t, &task); r.status != http.StatusAccepted {
		t.Fatalf("POST /api/v1/tasks: %d %s", r.status, r.body)
	}
	sse := openSSE(t, e.url+"/api/v1/tasks/"+task.ID+"/events", alice)
	// From now on the events stream takes nothing new: the task's end is
	// never stored.
	st, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.Discard, cfg.MaxMsgs = jetstream.DiscardNew, int64(st.CachedInfo().State.Msgs)
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, func() (bool, string) {
		r := httpDo(t, "GET", e.url+"/api/v1/tasks/"+task.ID, alice, nil)
		return r.status == http.StatusOK, "the task is still working"
	})
	if m, err := st.GetLastMsgForSubject(ctx, bus.NewSubjects("").Event("task", task.ID)); err == nil && strings.Contains(string(m.Data), model.TaskCompleted) {
		t.Fatal("the task's final event was stored: the test loses nothing")
	}

	frames := sseEnds(t, sse, 10*time.Second)
	var ev model.Task
	if n := len(frames); n == 0 || frames[n-1].event != model.TaskCompleted || json.Unmarshal([]byte(frames[n-1].data), &ev) != nil || ev.ID != task.ID {
		t.Fatalf("frames of the task's stream: %+v, want its completed state last", frames)
	}
}
