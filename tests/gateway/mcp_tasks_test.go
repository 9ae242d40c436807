package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/tests/internal/clitest"
)

// rpcAnswer is one JSON-RPC response of /mcp.
type rpcAnswer struct {
	status int
	Result map[string]json.RawMessage `json:"result"`
	Error  *struct {
		Code    int           `json:"code"`
		Message string        `json:"message"`
		Data    *apierr.Error `json:"data"`
	} `json:"error"`
}

// taskClient speaks to /mcp as one key: a session of 2025-11-25 (sid set by
// open) or, without one, a client of 2026-07-28 offering the Tasks extension.
type taskClient struct {
	url, key, sid string
}

const modernMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},` +
	`"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}`

// rpc sends method with params (a JSON object's members, without braces).
func (c *taskClient) rpc(t *testing.T, method, name, params string) rpcAnswer {
	t.Helper()
	hdr := map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream", "Authorization": "Bearer " + c.key}
	if c.sid != "" {
		hdr["Mcp-Session-Id"], hdr["Mcp-Protocol-Version"] = c.sid, "2025-11-25"
	} else {
		hdr["Mcp-Protocol-Version"], hdr["Mcp-Method"] = "2026-07-28", method
		if name != "" {
			hdr["Mcp-Name"] = name
		}
		params = strings.Join(nonEmpty(modernMeta, params), ",")
	}
	r := rawDo(t, http.MethodPost, c.url+"/mcp", fmt.Sprintf(`{"jsonrpc":"2.0","id":7,"method":%q,"params":{%s}}`, method, params), hdr)
	data := string(r.body)
	if i := strings.Index(data, "data: "); i >= 0 {
		data, _, _ = strings.Cut(data[i+len("data: "):], "\n")
	}
	out := rpcAnswer{status: r.status}
	if err := json.Unmarshal([]byte(data), &out); err != nil || (out.Result == nil && out.Error == nil) {
		t.Fatalf("%s: HTTP %d %s", method, r.status, r.body)
	}
	return out
}

func nonEmpty(s ...string) []string {
	var out []string
	for _, x := range s {
		if x != "" {
			out = append(out, x)
		}
	}
	return out
}

// ok is the result of an answer that must not be an error.
func (a rpcAnswer) ok(t *testing.T, what string) map[string]json.RawMessage {
	t.Helper()
	if a.Error != nil {
		t.Fatalf("%s: error %+v", what, *a.Error)
	}
	return a.Result
}

// refused checks an answer is the JSON-RPC error code with the contract's code.
func (a rpcAnswer) refused(t *testing.T, what string, code int, contract apierr.Code) {
	t.Helper()
	if a.Error == nil || a.Error.Code != code || (contract != "" && (a.Error.Data == nil || a.Error.Data.Code != contract)) {
		t.Fatalf("%s: %+v, want error %d %s", what, a, code, contract)
	}
}

// openSession initializes a session of 2025-11-25 and checks the server
// declares Tasks.
func openSession(t *testing.T, url, key string) *taskClient {
	t.Helper()
	hdr := map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream", "Authorization": "Bearer " + key}
	r := rawDo(t, http.MethodPost, url+"/mcp", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`, hdr)
	sid := r.header.Get("Mcp-Session-Id")
	if sid == "" || !strings.Contains(string(r.body), `"tasks":{"list":{},"cancel":{},"requests":{"tools":{"call":{}}}}`) {
		t.Fatalf("initialize: HTTP %d %s (session %q)", r.status, r.body, sid)
	}
	hdr["Mcp-Session-Id"], hdr["Mcp-Protocol-Version"] = sid, "2025-11-25"
	if r := rawDo(t, http.MethodPost, url+"/mcp", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, hdr); r.status != http.StatusAccepted {
		t.Fatalf("initialized: HTTP %d %s", r.status, r.body)
	}
	return &taskClient{url: url, key: key, sid: sid}
}

// close ends the session (DELETE), as a client that goes away.
func (c *taskClient) close(t *testing.T) {
	t.Helper()
	r := rawDo(t, http.MethodDelete, c.url+"/mcp", "", map[string]string{"Authorization": "Bearer " + c.key, "Mcp-Session-Id": c.sid, "Mcp-Protocol-Version": "2025-11-25"})
	if r.status != http.StatusNoContent && r.status != http.StatusOK {
		t.Fatalf("DELETE session: HTTP %d %s", r.status, r.body)
	}
}

// statusStream opens the session's GET stream and returns the params of the
// notifications/tasks/status it carries.
func (c *taskClient) statusStream(t *testing.T) <-chan map[string]any {
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
	out := make(chan map[string]any, 16)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			var msg struct {
				Method string         `json:"method"`
				Params map[string]any `json:"params"`
			}
			if ok && json.Unmarshal([]byte(data), &msg) == nil && msg.Method == "notifications/tasks/status" {
				out <- msg.Params
			}
		}
	}()
	return out
}

// waitStatus waits for the status notification of task id.
func waitStatus(t *testing.T, ch <-chan map[string]any, id, status string, within time.Duration) {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case p := <-ch:
			if p["taskId"] == id {
				if p["status"] != status {
					t.Fatalf("notifications/tasks/status of %s: %v, want %s", id, p, status)
				}
				return
			}
		case <-timeout:
			t.Fatalf("no notifications/tasks/status for %s within %s", id, within)
		}
	}
}

func str(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("not a string: %s", raw)
	}
	return s
}

// resultText is the first text of a CallToolResult.
func resultText(t *testing.T, raw []byte) string {
	t.Helper()
	var res struct {
		Content []struct{ Text string } `json:"content"`
	}
	if err := json.Unmarshal(raw, &res); err != nil || len(res.Content) == 0 {
		t.Fatalf("not a CallToolResult: %s", raw)
	}
	return res.Content[0].Text
}

// createdV1 is the handle a session's task-augmented tools/call answers.
func createdV1(t *testing.T, c *taskClient, ms int) string {
	t.Helper()
	return createdV1Tool(t, c, "slow__sleep", ms)
}

// createdV1Tool is createdV1 of another sleep tool.
func createdV1Tool(t *testing.T, c *taskClient, tool string, ms int) string {
	t.Helper()
	begin := time.Now()
	res := c.rpc(t, "tools/call", "", fmt.Sprintf(`"name":%q,"arguments":{"ms":%d},"task":{"ttl":60000}`, tool, ms)).ok(t, "tools/call as a task")
	var task struct {
		TaskID, Status string
		TTL            int64 `json:"ttl"`
		PollInterval   int64 `json:"pollInterval"`
	}
	if err := json.Unmarshal(res["task"], &task); err != nil || task.TaskID == "" || task.Status != model.TaskWorking || task.TTL <= 0 || task.PollInterval <= 0 {
		t.Fatalf("CreateTaskResult: %v", res)
	}
	if d := time.Since(begin); d > 20*time.Second { // before the 30 s calls end, with room for a loaded host
		t.Fatalf("the handle took %s", d)
	}
	return task.TaskID
}

// TestMCPTasks: durable tasks on /mcp from both eras, the bus and
// /mcp/invoke. Three 30 s calls run in parallel (a client of 2026-07-28, a
// session of 2025-11-25 and the bus), beside the short checks: a session
// that went away gets its result from a new one; tasks/list and every task
// verb see only the key's own tasks; cancel reaches the server; the status
// notification reaches the session; the TypeScript SDK's tasks API works.
func TestMCPTasks(t *testing.T) {
	t.Parallel()
	e := startMCP(t, gateway.Options{})
	mark := filepath.Join(t.TempDir(), "cancelled")
	runs := filepath.Join(t.TempDir(), "runs")
	cfg := testServerConfig("slow")
	cfg.EnvVars = map[string]model.EnvVar{"TESTMCP_CANCEL_FILE": {Value: mark}, "TESTMCP_RUN_FILE": {Value: runs}}
	e.enable(t, cfg)
	alice := e.createKey(t, model.KeyCreateRequest{Name: "alice", Scopes: []string{"call"}}).Key
	bob := e.createKey(t, model.KeyCreateRequest{Name: "bob", Scopes: []string{"call"}}).Key

	t.Run("modern-30s", func(t *testing.T) {
		t.Parallel()
		c := &taskClient{url: e.url, key: alice}
		begin := time.Now()
		res := c.rpc(t, "tools/call", "slow__sleep", `"name":"slow__sleep","arguments":{"ms":30000}`).ok(t, "tools/call")
		if str(t, res["resultType"]) != "task" || str(t, res["status"]) != model.TaskWorking || res["pollIntervalMs"] == nil || res["ttlMs"] == nil || time.Since(begin) > 20*time.Second {
			t.Fatalf("CreateTaskResult of 2026-07-28: %v", res)
		}
		id := str(t, res["taskId"])
		for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(time.Second) {
			got := c.rpc(t, "tasks/get", "", fmt.Sprintf(`"taskId":%q`, id)).ok(t, "tasks/get")
			if str(t, got["resultType"]) != "complete" {
				t.Fatalf("tasks/get: %v", got)
			}
			if s := str(t, got["status"]); s != model.TaskWorking {
				if s != model.TaskCompleted || resultText(t, got["result"]) != "slept 30000ms" {
					t.Fatalf("final task: %v", got)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the task never ended")
			}
		}
		t.Logf("2026-07-28 task done after %s", time.Since(begin).Round(time.Millisecond))
	})

	t.Run("session-30s", func(t *testing.T) {
		t.Parallel()
		c := openSession(t, e.url, alice)
		pushes := c.statusStream(t)
		begin := time.Now()
		id := createdV1(t, c, 30000)
		res := c.rpc(t, "tasks/result", "", fmt.Sprintf(`"taskId":%q`, id)).ok(t, "tasks/result")
		var meta map[string]map[string]string
		if err := json.Unmarshal(res["_meta"], &meta); err != nil || meta["io.modelcontextprotocol/related-task"]["taskId"] != id {
			t.Fatalf("tasks/result _meta: %s", res["_meta"])
		}
		raw, _ := json.Marshal(res)
		if resultText(t, raw) != "slept 30000ms" || time.Since(begin) < 29*time.Second {
			t.Fatalf("tasks/result after %s: %s", time.Since(begin), raw)
		}
		waitStatus(t, pushes, id, model.TaskCompleted, 10*time.Second)
	})

	t.Run("bus-30s", func(t *testing.T) {
		t.Parallel()
		msg := nats.NewMsg(bus.NewSubjects("").Call("slow", "sleep"))
		msg.Data = []byte(`{"ms":30000}`)
		msg.Header.Set(bus.HeaderTask, "true")
		p := principal.Key("bus-caller", false, model.ToolFilter{})
		principal.Set(msg.Header, p)
		reply, err := e.st.Conn.RequestMsg(msg, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var task model.Task
		if err := json.Unmarshal(reply.Data, &task); err != nil || task.State != model.TaskWorking || task.Principal != p.ID || task.Name != "slow__sleep" {
			t.Fatalf("Mcp-Task call reply: %s", reply.Data)
		}
		ctx := principal.With(ctxT(t, 2*time.Minute), p)
		for {
			done, err := e.st.Client.TaskResult(ctx, task.ID, 20*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if model.TaskFinal(done.State) {
				if done.State != model.TaskCompleted || resultText(t, done.Result) != "slept 30000ms" {
					t.Fatalf("bus task: %+v", done)
				}
				return
			}
		}
	})

	t.Run("short", func(t *testing.T) {
		t.Parallel()
		// The session that made a task goes away; a new one reads the result.
		a1 := openSession(t, e.url, alice)
		gone := createdV1(t, a1, 1500)
		a1.close(t)
		a2 := openSession(t, e.url, alice)
		res := a2.rpc(t, "tasks/result", "", fmt.Sprintf(`"taskId":%q`, gone)).ok(t, "tasks/result from a new session")
		raw, _ := json.Marshal(res)
		if resultText(t, raw) != "slept 1500ms" {
			t.Fatalf("result: %s", raw)
		}
		got := a2.rpc(t, "tasks/get", "", fmt.Sprintf(`"taskId":%q`, gone)).ok(t, "tasks/get")
		if str(t, got["status"]) != model.TaskCompleted || got["pollInterval"] != nil {
			t.Fatalf("tasks/get: %v", got)
		}

		// The status notification reaches the session that made the task.
		pushes := a2.statusStream(t)
		quick := createdV1(t, a2, 300)
		waitStatus(t, pushes, quick, model.TaskCompleted, 20*time.Second)

		// Another key sees none of it: not in its list, not found by id.
		b := openSession(t, e.url, bob)
		own := createdV1(t, b, 10)
		var list struct {
			Tasks []struct{ TaskID string }
		}
		listed := func(c *taskClient) []string {
			res := c.rpc(t, "tasks/list", "", "").ok(t, "tasks/list")
			raw, _ := json.Marshal(res)
			if err := json.Unmarshal(raw, &list); err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, x := range list.Tasks {
				ids = append(ids, x.TaskID)
			}
			return ids
		}
		if ids := listed(b); len(ids) != 1 || ids[0] != own {
			t.Fatalf("bob lists %v, want only %s", ids, own)
		}
		if ids := listed(a2); !contains(ids, gone) || !contains(ids, quick) || contains(ids, own) {
			t.Fatalf("alice lists %v", ids)
		}
		b.rpc(t, "tasks/get", "", fmt.Sprintf(`"taskId":%q`, gone)).refused(t, "bob's tasks/get of alice's task", -32602, apierr.NotFound)
		b.rpc(t, "tasks/result", "", fmt.Sprintf(`"taskId":%q`, gone)).refused(t, "bob's tasks/result", -32602, apierr.NotFound)
		b.rpc(t, "tasks/cancel", "", fmt.Sprintf(`"taskId":%q`, gone)).refused(t, "bob's tasks/cancel", -32602, apierr.NotFound)
		bm := &taskClient{url: e.url, key: bob}
		bm.rpc(t, "tasks/get", "", fmt.Sprintf(`"taskId":%q`, gone)).refused(t, "bob's modern tasks/get", -32602, apierr.NotFound)
		bm.rpc(t, "tasks/cancel", "", fmt.Sprintf(`"taskId":%q`, gone)).refused(t, "bob's modern tasks/cancel", -32602, apierr.NotFound)
		// Methods the extension does not have, and tasks/update of a task that asks nothing.
		bm.rpc(t, "tasks/list", "", "").refused(t, "modern tasks/list", -32601, "")
		bm.rpc(t, "tasks/update", "", fmt.Sprintf(`"taskId":%q,"inputResponses":{}`, own)).refused(t, "tasks/update", -32602, apierr.Conflict)

		// Cancel reaches the server (notifications/cancelled); a second one is refused.
		// The test server's sleep_idempotent (a sleep too) is run by this
		// task alone, so its start is told apart from the other subtests' sleeps.
		long := createdV1Tool(t, a2, "slow__sleep_idempotent", 60000)
		waitStarted(t, runs, "sleep_idempotent", 1)
		res = a2.rpc(t, "tasks/cancel", "", fmt.Sprintf(`"taskId":%q`, long)).ok(t, "tasks/cancel")
		if str(t, res["status"]) != model.TaskCancelled {
			t.Fatalf("tasks/cancel: %v", res)
		}
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if b, err := os.ReadFile(mark); err == nil && string(b) == "cancelled" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the server never saw the task's call cancelled")
			}
		}
		a2.rpc(t, "tasks/cancel", "", fmt.Sprintf(`"taskId":%q`, long)).refused(t, "second tasks/cancel", -32602, apierr.Conflict)
		a2.rpc(t, "tasks/result", "", fmt.Sprintf(`"taskId":%q`, long)).refused(t, "tasks/result of a cancelled task", -32603, "")

		// 2026-07-28: cancel, then the task says so.
		am := &taskClient{url: e.url, key: alice}
		res = am.rpc(t, "tools/call", "slow__sleep", `"name":"slow__sleep","arguments":{"ms":60000}`).ok(t, "tools/call")
		id := str(t, res["taskId"])
		if res := am.rpc(t, "tasks/cancel", "", fmt.Sprintf(`"taskId":%q`, id)).ok(t, "modern tasks/cancel"); str(t, res["resultType"]) != "complete" {
			t.Fatalf("modern tasks/cancel: %v", res)
		}
		if got := am.rpc(t, "tasks/get", "", fmt.Sprintf(`"taskId":%q`, id)).ok(t, "tasks/get"); str(t, got["status"]) != model.TaskCancelled {
			t.Fatalf("cancelled task: %v", got)
		}
		// Unknown tools and bad arguments are refused before any task exists.
		am.rpc(t, "tools/call", "slow__nope", `"name":"slow__nope","arguments":{}`).refused(t, "unknown tool", -32602, "")
		// A 2026-07-28 call whose arguments do not fit is answered inline, as a call is: a tool error.
		if res := am.rpc(t, "tools/call", "slow__sleep", `"name":"slow__sleep","arguments":{"ms":"long"}`).ok(t, "mismatch"); str(t, res["resultType"]) != "complete" || string(res["isError"]) != "true" {
			t.Fatalf("a 2026-07-28 call with bad arguments: %v", res)
		}
		a2.rpc(t, "tools/call", "", `"name":"slow__sleep","arguments":{"ms":"long"},"task":{}`).refused(t, "bad arguments", -32602, apierr.Validation)

		// The approval rules apply before a task exists, on every front door.
		if r := httpDo(t, http.MethodPut, e.url+"/api/v1/approvals/rules", e.admin, model.ApprovalRules{TimeoutSeconds: 60,
			Rules: []model.GatewayApprovalRule{{Tool: "slow__echo", Decision: model.ApprovalDeny}}}); r.status != http.StatusOK {
			t.Fatalf("PUT rules: %d %s", r.status, r.body)
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			r := rawDo(t, http.MethodPost, e.url+"/api/v1/tasks", `{"name":"slow__echo","arguments":{"message":"x"}}`,
				map[string]string{"Authorization": "Bearer " + alice, "Content-Type": "application/json"})
			if r.status == http.StatusForbidden && strings.Contains(string(r.body), string(apierr.Unauthorized)) {
				break
			}
			if r.status != http.StatusAccepted || time.Now().After(deadline) {
				t.Fatalf("POST /api/v1/tasks of a denied tool: %d %s", r.status, r.body)
			}
		}
		a2.rpc(t, "tools/call", "", `"name":"slow__echo","arguments":{"message":"x"},"task":{}`).refused(t, "denied session task", -32600, apierr.Unauthorized)
		am.rpc(t, "tools/call", "slow__echo", `"name":"slow__echo","arguments":{"message":"x"}`).refused(t, "denied modern task", -32600, apierr.Unauthorized)
		r := rawDo(t, http.MethodPost, e.url+"/mcp/invoke", `{"tool_name":"slow__echo","params":{"message":"x"}}`,
			map[string]string{"Authorization": "Bearer " + alice, "Content-Type": "application/json", "Mcp-Task": "true"})
		if r.status != http.StatusOK || !strings.Contains(string(r.body), `"success":false`) || strings.Contains(string(r.body), `"state"`) {
			t.Fatalf("/mcp/invoke of a denied tool with Mcp-Task: %d %s", r.status, r.body)
		}

		// Mcp-Task: true on /mcp/invoke: the handle, 202.
		r = rawDo(t, http.MethodPost, e.url+"/mcp/invoke", `{"tool_name":"slow__sleep","params":{"ms":10}}`,
			map[string]string{"Authorization": "Bearer " + alice, "Content-Type": "application/json", "Mcp-Task": "true"})
		var task model.Task
		if json.Unmarshal(r.body, &task) != nil || r.status != http.StatusAccepted || task.State != model.TaskWorking || r.header.Get("Location") != "/api/v1/tasks/"+task.ID {
			t.Fatalf("/mcp/invoke with Mcp-Task: %d %s", r.status, r.body)
		}
		res = a2.rpc(t, "tasks/result", "", fmt.Sprintf(`"taskId":%q`, task.ID)).ok(t, "tasks/result of the invoke task")
		raw, _ = json.Marshal(res)
		if resultText(t, raw) != "slept 10ms" {
			t.Fatalf("invoke task result: %s", raw)
		}
	})

	t.Run("typescript-sdk", func(t *testing.T) {
		t.Parallel()
		node, err := exec.LookPath("node")
		if err != nil {
			t.Fatalf("node is not installed: %v", err)
		}
		dir := t.TempDir()
		if err := os.Symlink(filepath.Join(clitest.RepoRoot(t), "tests", "npm", "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
			t.Fatal(err)
		}
		script := filepath.Join(dir, "tasks.mjs")
		if err := os.WriteFile(script, []byte(tasksScript), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.CommandContext(ctxT(t, 90*time.Second), node, script, e.url+"/mcp", alice).CombinedOutput()
		if err != nil {
			t.Fatalf("node tasks.mjs: %v\n%s", err, out)
		}
		var got struct {
			Tasks  bool
			Events []string
			Status string
			Listed bool
			Text   string
			Again  string
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if json.Unmarshal([]byte(lines[len(lines)-1]), &got) != nil {
			t.Fatalf("tasks.mjs printed:\n%s", out)
		}
		if !got.Tasks || !contains(got.Events, "taskCreated") || !contains(got.Events, "result") || got.Status != model.TaskCompleted ||
			!got.Listed || got.Text != "slept 1500ms" || got.Again != "slept 1500ms" {
			t.Fatalf("the TypeScript SDK's tasks: %+v", got)
		}
	})
}

// tasksScript runs a tool as a task with the official TypeScript SDK (v1, a
// session of 2025-11-25) through its experimental tasks API: the stream of
// the call (task created, polled, result), then tasks/get, tasks/list and
// tasks/result by id.
const tasksScript = `
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js";
const [url, key] = process.argv.slice(2);
const client = new Client({ name: "tasks-test", version: "1" });
await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { Authorization: "Bearer " + key } } }));
const caps = client.getServerCapabilities();
const events = [];
let id, text;
for await (const m of client.experimental.tasks.callToolStream({ name: "slow__sleep", arguments: { ms: 1500 } }, CallToolResultSchema, { task: { ttl: 60000 } })) {
  events.push(m.type === "error" ? "error: " + m.error.message : m.type);
  if (m.type === "taskCreated") id = m.task.taskId;
  if (m.type === "result") text = m.result.content[0].text;
}
const got = await client.experimental.tasks.getTask(id);
const list = await client.experimental.tasks.listTasks();
const again = await client.experimental.tasks.getTaskResult(id, CallToolResultSchema);
console.log(JSON.stringify({ tasks: !!caps.tasks?.requests?.tools?.call, events: [...new Set(events)], status: got.status,
  listed: list.tasks.some((t) => t.taskId === id), text, again: again.content[0].text }));
await client.close();
`
