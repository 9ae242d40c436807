package mcpserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
	"github.com/mcpbus/mcpbus/services/gateway/mcpserver"
)

// sessionTask opens a 2025-11-25 session as key and makes a task in it (a
// long sleep, wanting progress, whose progress and end the test announces
// itself); it returns the session and the task's ids.
func sessionTask(t *testing.T, base, key string) (sid, taskID string) {
	t.Helper()
	r := raw(t, base, key, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if r.session == "" {
		t.Fatalf("initialize as %s: %d %s", key, r.status, r.body)
	}
	sid = r.session
	raw(t, base, key, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	m := decodeMsg(t, raw(t, base, key, sid, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"alpha__sleep","arguments":{"ms":60000},"task":{},"_meta":{"progressToken":"p"}}}`))
	var task struct{ TaskID string }
	if err := json.Unmarshal(m.Result["task"], &task); err != nil || task.TaskID == "" {
		t.Fatalf("tools/call as a task as %s: %+v", key, m)
	}
	return sid, task.TaskID
}

// A client that opens its session's GET stream and never reads it stalls
// no other key's notifications/tasks/status: the task events of every
// session of the instance come through one NATS callback, and a session's
// notifications are written to its stream from a goroutine of its own.
func TestUnreadStreamStallsNoOtherKeysTasks(t *testing.T) {
	principals := map[string]*auth.Principal{
		"k-hostile": {KeyID: "k-hostile", Scopes: []string{auth.ScopeCall}},
		"k-victim":  {KeyID: "k-victim", Scopes: []string{auth.ScopeCall}},
	}
	// The unread stream's writes time out after 60 s: a victim held up
	// behind it would wait that long, far past the 15 s a loaded machine
	// may take to pass 10 MiB through the callback.
	e := start(t, mcpserver.Options{StreamWriteTimeout: 60 * time.Second}, keys(principals))
	e.addServer(t, "alpha", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	hostileSID, hostileTask := sessionTask(t, e.url, "k-hostile")
	victimSID, victimTask := sessionTask(t, e.url, "k-victim")

	// The victim reads its GET stream.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.url, nil)
	req.Header.Set("Authorization", "Bearer k-victim")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", victimSID)
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the victim's GET stream: %v %v", resp, err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	statuses := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "notifications/tasks/status") {
				statuses <- sc.Text()
			}
		}
	}()

	// The hostile session opens its GET stream and never reads it, while
	// its task reports much progress (big messages: its connection's
	// buffers fill up), and then both tasks end, the hostile's first.
	openUnreadStream(t, e.url, "k-hostile", hostileSID)
	subj := bus.NewSubjects("")
	publish := func(id string, task model.Task) {
		task.ID, task.Server, task.Tool, task.Name, task.TTLMs = id, "alpha", "sleep", "alpha__sleep", 60000
		task.CreatedAt, task.UpdatedAt = time.Now(), time.Now()
		data, _ := json.Marshal(task)
		if err := e.NC.Publish(subj.Event("task", id), data); err != nil {
			t.Fatal(err)
		}
	}
	big := strings.Repeat("x", 100<<10)
	for i := range 100 { // 10 MiB
		publish(hostileTask, model.Task{State: model.TaskWorking, Progress: &model.TaskProgress{Progress: float64(i + 1), Total: 1000, Message: big}})
	}
	publish(hostileTask, model.Task{State: model.TaskCompleted})
	publish(victimTask, model.Task{State: model.TaskCompleted})
	if err := e.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		select {
		case line := <-statuses:
			if !strings.Contains(line, victimTask) {
				t.Fatalf("the victim got another task's status: %s", line)
			}
			t.Logf("the victim's notifications/tasks/status came after %v", time.Since(start))
			return
		case <-time.After(15*time.Second - time.Since(start)):
			t.Fatalf("the victim's notifications/tasks/status is held up behind another key's unread stream")
		}
	}
}
