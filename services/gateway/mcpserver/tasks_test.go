package mcpserver_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/mcpbus/mcpbus/services/gateway/mcpserver"
)

// A session of 2025-11-25 learns that /mcp runs tools as tasks (the tasks
// capability, each server tool's taskSupport), and one such task runs to
// its result.
func TestSessionTasks(t *testing.T) {
	e := start(t, mcpserver.Options{NoAuth: true}, nil)
	e.addServer(t, "alpha", nil)

	r := raw(t, e.url, "", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	var caps struct {
		Tasks struct {
			List, Cancel *struct{}
			Requests     struct {
				Tools struct{ Call *struct{} }
			}
		}
	}
	if err := json.Unmarshal(decodeMsg(t, r).Result["capabilities"], &caps); err != nil || caps.Tasks.List == nil || caps.Tasks.Cancel == nil || caps.Tasks.Requests.Tools.Call == nil {
		t.Fatalf("initialize: %s", r.body)
	}
	sid := r.session
	raw(t, e.url, "", sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	var list struct {
		Tools []struct {
			Name      string
			Execution struct{ TaskSupport string }
		}
	}
	if err := json.Unmarshal(decodeMsg(t, raw(t, e.url, "", sid, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)).Result["tools"], &list.Tools); err != nil || len(list.Tools) == 0 {
		t.Fatalf("tools/list: %v", err)
	}
	for _, tool := range list.Tools {
		if tool.Execution.TaskSupport != "optional" {
			t.Errorf("tool %s: taskSupport %q", tool.Name, tool.Execution.TaskSupport)
		}
	}

	m := decodeMsg(t, raw(t, e.url, "", sid, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"alpha__echo","arguments":{"message":"as a task"},"task":{}}}`))
	var created struct {
		Task struct{ TaskID, Status string }
	}
	if err := json.Unmarshal(m.Result["task"], &created.Task); err != nil || created.Task.TaskID == "" || created.Task.Status != "working" {
		t.Fatalf("tools/call as a task: %+v", m)
	}
	res := raw(t, e.url, "", sid, `{"jsonrpc":"2.0","id":4,"method":"tasks/result","params":{"taskId":"`+created.Task.TaskID+`"}}`)
	if m := decodeMsg(t, res); m.Error != nil || !strings.Contains(string(m.Result["content"]), "as a task") || !strings.Contains(string(m.Result["_meta"]), created.Task.TaskID) {
		t.Fatalf("tasks/result: %s", res.body)
	}
	get := decodeMsg(t, raw(t, e.url, "", sid, `{"jsonrpc":"2.0","id":5,"method":"tasks/get","params":{"taskId":"`+created.Task.TaskID+`"}}`))
	if string(get.Result["status"]) != `"completed"` {
		t.Fatalf("tasks/get: %+v", get)
	}
	if m := decodeMsg(t, raw(t, e.url, "", sid, `{"jsonrpc":"2.0","id":6,"method":"tasks/get","params":{}}`)); m.Error == nil || m.Error.Code != -32602 {
		t.Fatalf("tasks/get without taskId: %+v", m)
	}
	// go-sdk's DNS-rebinding guard holds for tasks as for calls.
	call := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"alpha__echo","arguments":{"message":"x"},"task":{}}}`
	if r := rawWith(t, e.url, "", sid, call, map[string]string{"Host": "evil.example"}); r.status != http.StatusForbidden || strings.Contains(r.body, "taskId") {
		t.Fatalf("a task from a foreign Host: %d %s", r.status, r.body)
	}
}
