package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
)

// progressArgs make the test server's progress tool report 8 steps over 4 s.
const progressArgs = `{"steps":8,"ms":500}`

// stepText is a recorded progress of that tool, as statusMessage and the
// CLI show it.
var stepText = regexp.MustCompile(`^step ([1-8]) \(([1-8])/8\)$`)

// TestTaskProgressFrontDoors: a task of a real MCP server that reports
// progress over 4 s is read while it runs through every front door: the
// REST API (the task and its event stream) and the bus; tasks/get's
// statusMessage in both eras of /mcp; and notifications/progress with the
// call's token on a 2025-11-25 session's GET stream. Nothing about
// progress follows the task's end.
func TestTaskProgressFrontDoors(t *testing.T) {
	e := startMCP(t, gateway.Options{})
	e.enable(t, testServerConfig("prog"))
	alice := e.createKey(t, model.KeyCreateRequest{Name: "alice", Scopes: []string{"call"}}).Key

	t.Run("rest-and-bus", func(t *testing.T) {
		t.Parallel()
		var task model.Task
		r := httpDo(t, "POST", e.url+"/api/v1/tasks", alice, map[string]any{"name": "prog__progress", "arguments": json.RawMessage(progressArgs)})
		r.decode(t, &task)
		if r.status != http.StatusAccepted {
			t.Fatalf("POST /api/v1/tasks: %d %s", r.status, r.body)
		}
		sse := openSSE(t, e.url+"/api/v1/tasks/"+task.ID+"/events", alice)
		var got model.Task
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			r := httpDo(t, "GET", e.url+"/api/v1/tasks/"+task.ID, alice, nil)
			r.decode(t, &got)
			if r.status != http.StatusOK || model.TaskFinal(got.State) || time.Now().After(deadline) {
				t.Fatalf("no progress while the task worked: %d %s", r.status, r.body)
			}
			if got.Progress != nil {
				break
			}
		}
		if !stepText.MatchString(got.Progress.String()) {
			t.Fatalf("GET /api/v1/tasks/{id}: progress %+v", *got.Progress)
		}
		bus, err := e.st.Client.Task(ctxT(t, 10*time.Second), task.ID) // the operator reads any task
		if err != nil || bus.Progress == nil || bus.Progress.Total != 8 {
			t.Fatalf("task.get on the bus: %+v, %v", bus, err)
		}

		working, last := 0, 0.0
		for end := time.After(30 * time.Second); ; {
			var f sseFrame
			select {
			case f = <-sse.frames:
			case <-end:
				t.Fatal("no completed frame on the task's event stream")
			}
			var ev model.Task
			if err := json.Unmarshal([]byte(f.data), &ev); err != nil || ev.ID != task.ID || ev.Result != nil {
				t.Fatalf("SSE frame: %+v", f)
			}
			if f.event == model.TaskCompleted {
				break
			}
			if f.event != model.TaskWorking || ev.Progress == nil || ev.Progress.Progress < last {
				t.Fatalf("SSE frame before the end: %+v (last progress %v)", f, last)
			}
			working, last = working+1, ev.Progress.Progress
		}
		// 8 notifications in 4 s: at most one recorded per 500 ms.
		if working < 2 || working > 9 {
			t.Fatalf("%d progress frames for 8 notifications over 4 s", working)
		}
		select {
		case f, ok := <-sse.frames:
			if ok {
				t.Fatalf("a frame after the end: %+v", f)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the task's event stream is still open 5 s after its end")
		}
	})

	t.Run("session-2025-11-25", func(t *testing.T) {
		t.Parallel()
		c := openSession(t, e.url, alice)
		stream := c.notifications(t)
		res := c.rpc(t, "tools/call", "", `"name":"prog__progress","arguments":`+progressArgs+`,"task":{"ttl":60000},"_meta":{"progressToken":"tok-1"}`).ok(t, "tools/call as a task")
		var created struct {
			TaskID string `json:"taskId"`
		}
		if err := json.Unmarshal(res["task"], &created); err != nil || created.TaskID == "" {
			t.Fatalf("CreateTaskResult: %v", res)
		}
		id := created.TaskID
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			got := c.rpc(t, "tasks/get", "", fmt.Sprintf(`"taskId":%q`, id)).ok(t, "tasks/get")
			if str(t, got["status"]) != model.TaskWorking || time.Now().After(deadline) {
				t.Fatalf("no statusMessage while the task worked: %v", got)
			}
			if m, ok := got["statusMessage"]; ok {
				if !stepText.MatchString(str(t, m)) {
					t.Fatalf("tasks/get statusMessage: %s", m)
				}
				break
			}
		}

		progress, last := 0, 0.0
		for end := time.After(30 * time.Second); ; {
			var n note
			select {
			case n = <-stream:
			case <-end:
				t.Fatal("no notifications/tasks/status for the task")
			}
			if n.Method == "notifications/tasks/status" && n.Params["taskId"] == id {
				if n.Params["status"] != model.TaskCompleted {
					t.Fatalf("status notification: %v", n.Params)
				}
				break
			}
			if n.Method != "notifications/progress" {
				continue
			}
			meta, _ := n.Params["_meta"].(map[string]any)
			related, _ := meta["io.modelcontextprotocol/related-task"].(map[string]any)
			p, _ := n.Params["progress"].(float64)
			if n.Params["progressToken"] != "tok-1" || related["taskId"] != id || p <= last || n.Params["total"] != 8.0 {
				t.Fatalf("notifications/progress: %v (last progress %v)", n.Params, last)
			}
			progress, last = progress+1, p
		}
		if progress == 0 {
			t.Fatal("the session got no notifications/progress for its task")
		}
		select {
		case n := <-stream:
			if n.Method == "notifications/progress" {
				t.Fatalf("progress after the task ended: %v", n.Params)
			}
		case <-time.After(1500 * time.Millisecond):
		}
	})

	t.Run("client-2026-07-28", func(t *testing.T) {
		t.Parallel()
		c := &taskClient{url: e.url, key: alice}
		res := c.rpc(t, "tools/call", "prog__progress", `"name":"prog__progress","arguments":`+progressArgs).ok(t, "tools/call")
		id := str(t, res["taskId"])
		sawProgress := false
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			got := c.rpc(t, "tasks/get", id, fmt.Sprintf(`"taskId":%q`, id)).ok(t, "tasks/get")
			status := str(t, got["status"])
			if status == model.TaskCompleted {
				if resultText(t, got["result"]) != "done 8 steps" {
					t.Fatalf("completed task: %v", got)
				}
				break
			}
			if status != model.TaskWorking || time.Now().After(deadline) {
				t.Fatalf("tasks/get: %v", got)
			}
			if m, ok := got["statusMessage"]; ok {
				if !stepText.MatchString(str(t, m)) {
					t.Fatalf("tasks/get statusMessage: %s", m)
				}
				sawProgress = true
			}
		}
		if !sawProgress {
			t.Fatal("tasks/get never showed the working task's progress as statusMessage")
		}
	})
}

// note is one JSON-RPC notification of a session's GET stream.
type note struct {
	Method string         `json:"method"`
	Params map[string]any `json:"params"`
}

// notifications opens the session's GET stream and returns every
// notification it carries.
func (c *taskClient) notifications(t *testing.T) <-chan note {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, c.url+"/mcp", nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"Accept": "text/event-stream", "Authorization": "Bearer " + c.key, "Mcp-Session-Id": c.sid, "Mcp-Protocol-Version": "2025-11-25"} {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET stream: %v %v", resp, err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	out := make(chan note, 64)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var n note
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && json.Unmarshal([]byte(data), &n) == nil && n.Method != "" {
				out <- n
			}
		}
	}()
	return out
}
