package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/approvals"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/telemetry/conv"
)

// Durable tasks on /mcp. go-sdk v1.8.0 has no Tasks, so the gateway answers
// them before go-sdk, as the call fast path does, over the task verbs of the
// bus (mcp.v1.task.*, served by the runners; docs/tasks.md):
//
//   - a session of 2025-11-25 sends tools/call with a "task" param and gets
//     the CreateTaskResult at once; tasks/get, tasks/result (waits for the
//     end), tasks/list and tasks/cancel; notifications/tasks/status reaches
//     the session that made the task when it ends (taskpush.go), and
//     notifications/progress while it works when its call carried a
//     progressToken (taskprogress.go);
//   - a client of 2026-07-28 that offers the Tasks extension in the
//     request's client capabilities gets every tools/call answered with a
//     task (resultType "task"); tasks/get (a final task carries its result
//     or error), tasks/cancel and tasks/update.
//
// A task is the principal's: the request's principal travels with every
// task verb, and another one's task is not found. The key's tool filter is
// the view's (and the runner's); the approval rules apply before the task
// is made, waiting for an approver when they ask (the handle comes once
// approved).

// taskMethods are the Tasks methods /mcp answers itself.
var taskMethods = map[string]bool{"tasks/get": true, "tasks/result": true, "tasks/list": true, "tasks/cancel": true, "tasks/update": true}

// tasksServed reports whether this aggregate serves tasks: not as an agent
// (agents have no task subjects) nor over stdio (serve-stdio: go-sdk alone
// answers there).
func (a *Aggregator) tasksServed() bool { return a.opts.Agent == "" && !a.opts.Local }

// taskPath answers msg when it is a Tasks request and reports whether it
// did. modern: the request is of protocol 2026-07-28; ls: its live session
// (nil without one).
func (a *Aggregator) taskPath(w http.ResponseWriter, r *http.Request, v *view, ls *liveSession, modern bool, msg jsonrpc.Message) bool {
	req, ok := msg.(*jsonrpc.Request)
	if !ok || !req.IsCall() || !a.tasksServed() {
		return false
	}
	if req.Method == "tools/call" {
		name, args, asTask := taskCall(req.Params, modern)
		if !asTask || !taskEligible(r) {
			return false
		}
		if modern && (r.Header.Get("Mcp-Method") != "tools/call" || r.Header.Get("Mcp-Name") != name) {
			return false // go-sdk answers the missing or mismatched headers
		}
		if modern && !a.taskReady(r.Context(), v, name, args) {
			// The extension lets the server answer inline: what a call
			// answers at once (an unknown tool, search mode's own tools,
			// arguments that do not fit) is answered as for a call.
			return false
		}
		var token json.RawMessage
		if !modern {
			token = callProgressToken(req.Params)
		}
		a.taskOp(w, r, ls, modern, req, name, func(ctx context.Context) (any, *jsonrpc.Error) {
			return a.createTask(ctx, v, ls, modern, name, args, token)
		})
		return true
	}
	if !taskMethods[req.Method] || !taskEligible(r) {
		return false
	}
	var p struct {
		TaskID         string          `json:"taskId"`
		InputResponses json.RawMessage `json:"inputResponses"`
	}
	if len(req.Params) > 0 && json.Unmarshal(req.Params, &p) != nil {
		a.taskOp(w, r, ls, modern, req, "", func(context.Context) (any, *jsonrpc.Error) {
			return nil, rpcError(jsonrpc.CodeInvalidParams, apierr.Invalid("params", "params must be an object"))
		})
		return true
	}
	var do func(ctx context.Context) (any, *jsonrpc.Error)
	switch {
	case modern && r.Header.Get("Mcp-Method") != req.Method:
		do = func(context.Context) (any, *jsonrpc.Error) {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "the Mcp-Method header must name the request's method (" + req.Method + ")"}
		}
	case req.Method == "tasks/list" && !modern:
		do = func(ctx context.Context) (any, *jsonrpc.Error) { return a.listTasks(ctx) }
	case req.Method == "tasks/list", req.Method == "tasks/result" && modern, req.Method == "tasks/update" && !modern:
		// Not methods of the client's version of Tasks.
		do = func(context.Context) (any, *jsonrpc.Error) {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: fmt.Sprintf("Method not found: %q", req.Method)}
		}
	case p.TaskID == "":
		do = func(context.Context) (any, *jsonrpc.Error) {
			return nil, rpcError(jsonrpc.CodeInvalidParams, apierr.Invalid("taskId", "taskId is required"))
		}
	case req.Method == "tasks/get":
		do = func(ctx context.Context) (any, *jsonrpc.Error) { return a.getTask(ctx, modern, p.TaskID) }
	case req.Method == "tasks/result":
		do = func(ctx context.Context) (any, *jsonrpc.Error) { return a.taskResult(ctx, p.TaskID) }
	case req.Method == "tasks/cancel":
		do = func(ctx context.Context) (any, *jsonrpc.Error) { return a.cancelTask(ctx, modern, p.TaskID) }
	default: // tasks/update
		do = func(ctx context.Context) (any, *jsonrpc.Error) { return a.updateTask(ctx, p.TaskID) }
	}
	// The task id is an attribute, not the span name's target: one name
	// per task would be a name per request.
	a.taskOp(w, r, ls, modern, req, "", do, conv.MCPBusTaskID.String(p.TaskID))
	return true
}

// taskEligible says whether the HTTP side of r is one go-sdk would serve
// (fastcall.go's eligible; a missing protocol version is 2025-03-26's, as
// go-sdk takes it): anything else goes to go-sdk, which refuses it as the
// spec says (a foreign Host on a loopback listener among them).
func taskEligible(r *http.Request) bool {
	if r.Header.Get("Mcp-Protocol-Version") != "" {
		return eligible(r)
	}
	r2 := r.Clone(r.Context())
	r2.Header.Set("Mcp-Protocol-Version", "2025-03-26")
	return eligible(r2)
}

// taskCall reads a tools/call that asks for a task: for 2025-11-25 a
// "task" param (an object: its ttl is a wish the retention overrides); for
// 2026-07-28 the extension among the request's client capabilities. A cheap
// scan first: most calls are not tasks.
func taskCall(params json.RawMessage, modern bool) (name string, args json.RawMessage, ok bool) {
	if modern && !bytes.Contains(params, []byte(tasksExtension)) || !modern && !bytes.Contains(params, []byte(`"task"`)) {
		return "", nil, false
	}
	var p struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
		Task      json.RawMessage `json:"task"`
		// A retry of a multi round-trip call (mrtr.go) is never a new task.
		RequestState   json.RawMessage `json:"requestState"`
		InputResponses json.RawMessage `json:"inputResponses"`
		Meta           struct {
			Caps struct {
				Extensions map[string]json.RawMessage `json:"extensions"`
			} `json:"io.modelcontextprotocol/clientCapabilities"`
		} `json:"_meta"`
	}
	if json.Unmarshal(params, &p) != nil || p.Name == "" || p.RequestState != nil || p.InputResponses != nil {
		return "", nil, false // go-sdk answers it
	}
	if modern {
		ext := bytes.TrimSpace(p.Meta.Caps.Extensions[tasksExtension])
		return p.Name, p.Arguments, len(ext) > 0 && ext[0] == '{'
	}
	t := bytes.TrimSpace(p.Task)
	return p.Name, p.Arguments, len(t) > 0 && t[0] == '{'
}

// taskOp runs one Tasks request as an MCP server span and writes its
// JSON-RPC response. spanOnly are attributes of the span alone (the task
// id: one per task, never a metric label).
func (a *Aggregator) taskOp(w http.ResponseWriter, r *http.Request, ls *liveSession, modern bool, req *jsonrpc.Request, target string, do func(context.Context) (any, *jsonrpc.Error), spanOnly ...attribute.KeyValue) {
	session, protocol := "", modernVersion
	if ls != nil {
		session = ls.ss.ID()
		if ip := ls.ss.InitializeParams(); ip != nil {
			protocol = negotiated(ip.ProtocolVersion)
		}
	}
	ctx, op := a.tel.start(r.Context(), opRequest{method: req.Method, target: target, header: r.Header,
		meta: traceMeta(req.Params), id: &req.ID, session: session, protocol: protocol, spanOnly: spanOnly})
	res, rerr := do(ctx)
	if rerr != nil {
		op.End(ctx, fmt.Sprint(rerr.Code), rerr)
		if r.Context().Err() == nil {
			writeRPC(w, errorStatus(modern, rerr), &jsonrpc.Response{ID: req.ID, Error: rerr})
		}
		return
	}
	raw, err := json.Marshal(res)
	if err != nil {
		rerr = rpcError(jsonrpc.CodeInternalError, apierr.Wrap(apierr.Internal, "encoding the result", err))
		op.End(ctx, "encoding", rerr)
		writeRPC(w, http.StatusOK, &jsonrpc.Response{ID: req.ID, Error: rerr})
		return
	}
	op.End(ctx, "", nil)
	writeRPC(w, http.StatusOK, &jsonrpc.Response{ID: req.ID, Result: raw})
}

// taskTool is the tool a task of v names: one it lists, or in search mode
// any it may call.
func (a *Aggregator) taskTool(ctx context.Context, v *view, name string) *toolEntry {
	return a.awaitTool(ctx, v, name, func(name string) *toolEntry { // a.mu is held
		if e := v.installed[name]; e != nil && e.cat.Server != "" {
			return e
		}
		if e := a.tools[name]; v.search && e != nil && v.principal.AllowsTool(e.names()...) {
			return e
		}
		return nil
	})
}

// taskReady reports whether a call of name with args may become a task: a
// server's tool of v, with arguments that fit its input schema.
func (a *Aggregator) taskReady(ctx context.Context, v *view, name string, args json.RawMessage) bool {
	e := a.taskTool(ctx, v, name)
	if e == nil {
		return false
	}
	_, bad, mismatch := checkArguments(e, args)
	return bad == nil && mismatch == nil
}

// createTask checks a tools/call as a call is checked (the tool, its
// arguments, the approval rules, a restart under way) and makes it a task.
// token is the call's progressToken (2025-11-25; nil without one): the
// session gets the task's progress for it.
func (a *Aggregator) createTask(ctx context.Context, v *view, ls *liveSession, modern bool, name string, rawArgs json.RawMessage, token json.RawMessage) (any, *jsonrpc.Error) {
	e := a.taskTool(ctx, v, name)
	if e == nil {
		return nil, rpcError(jsonrpc.CodeInvalidParams, apierr.Newf(apierr.NotFound, "unknown tool %q", name).WithField("name"))
	}
	args, bad, mismatch := checkArguments(e, rawArgs)
	if bad == nil {
		bad = mismatch // a task has no result to carry a tool error yet
	}
	if bad != nil {
		return nil, rpcError(jsonrpc.CodeInvalidParams, bad)
	}
	if a.opts.Approvals != nil {
		// Held calls wait for an approver (CLI, REST, console): the handle
		// comes once the call is approved.
		msg, err := a.opts.Approvals.Enforce(ctx, approvals.Call{Principal: v.principal.Bus().ID,
			Server: e.cat.Server, Tool: e.name, ServerTool: e.cat.Tool, Arguments: args, Deferred: true}, nil)
		if err != nil {
			return nil, approvalError(err)
		}
		if msg != "" {
			return nil, rpcError(jsonrpc.CodeInvalidRequest, apierr.New(apierr.Unauthorized, msg))
		}
	}
	if rerr := a.restartError(e); rerr != nil {
		return nil, rerr
	}
	task, err := a.client.CreateTask(ctx, e.cat.Server, e.cat.Tool, args)
	if err != nil {
		return nil, a.taskFailure(err)
	}
	if ls != nil {
		a.pushes.watch(ctx, a, ls, task.ID, token)
	}
	if modern {
		out := toV2(task, "task")
		out.Meta = map[string]json.RawMessage{mcp.MetaKeyServerInfo: a.serverInfo}
		return out, nil
	}
	return createdV1{Task: toV1(task)}, nil
}

// taskFailure maps a failed task verb to the JSON-RPC error of the spec:
// -32602 for an unknown task (or tool) and a bad request, -32603 otherwise.
func (a *Aggregator) taskFailure(err error) *jsonrpc.Error {
	ae := apierr.From(err)
	switch ae.Code {
	case apierr.NotFound, apierr.Validation, apierr.Conflict:
		return rpcError(jsonrpc.CodeInvalidParams, ae)
	}
	return rpcError(jsonrpc.CodeInternalError, ae)
}

// getTask answers tasks/get: the task (2026-07-28: with its result or
// error once final).
func (a *Aggregator) getTask(ctx context.Context, modern bool, id string) (any, *jsonrpc.Error) {
	if !modern {
		t, err := a.client.Task(ctx, id)
		if err != nil {
			return nil, a.taskFailure(err)
		}
		return toV1(t), nil
	}
	t, err := a.client.TaskResult(ctx, id, 0)
	if err != nil {
		return nil, a.taskFailure(err)
	}
	return a.detailedV2(t), nil
}

// detailedV2 is a task of tasks/get for the extension.
func (a *Aggregator) detailedV2(t model.Task) taskV2 {
	out := toV2(t, "complete")
	switch t.State {
	case model.TaskCompleted:
		raw, err := eraResult(linkedURIs(t.Result, t.Server), a.serverInfo)
		if err != nil {
			out.Status, out.StatusMessage = model.TaskFailed, "the tool's result is not a CallToolResult"
			out.Error = rpcError(jsonrpc.CodeInternalError, apierr.New(apierr.Internal, out.StatusMessage))
			break
		}
		out.Result = raw
	case model.TaskFailed:
		out.Error = taskError(t)
	}
	out.Meta = map[string]json.RawMessage{mcp.MetaKeyServerInfo: a.serverInfo}
	return out
}

// taskResult answers tasks/result (2025-11-25): the tool's CallToolResult
// once the task has ended, or its error; it waits for the end within the
// call timeout (each wait one bus request of at most model.TaskMaxWait).
func (a *Aggregator) taskResult(ctx context.Context, id string) (any, *jsonrpc.Error) {
	ctx, cancel := context.WithTimeout(ctx, a.opts.CallTimeout)
	defer cancel()
	for {
		wait := model.TaskMaxWait
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(dl)-time.Second) // room for the reply
		}
		if wait <= 0 {
			break
		}
		t, err := a.client.TaskResult(ctx, id, wait)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return nil, a.taskFailure(err)
		}
		if !model.TaskFinal(t.State) {
			continue
		}
		if t.State != model.TaskCompleted {
			return nil, taskError(t)
		}
		raw, err := eraResult(linkedURIs(t.Result, t.Server), nil)
		if err == nil {
			raw, err = withRelatedTask(raw, id)
		}
		if err != nil {
			return nil, rpcError(jsonrpc.CodeInternalError, apierr.New(apierr.Internal, "the tool's result is not a CallToolResult"))
		}
		return json.RawMessage(raw), nil
	}
	return nil, rpcError(jsonrpc.CodeInternalError, apierr.Newf(apierr.Network,
		"task %s is still working after %s: ask tasks/result again (or poll tasks/get)", id, a.opts.CallTimeout).WithField("taskId"))
}

// withRelatedTask adds the related-task _meta of a tasks/result.
func withRelatedTask(raw []byte, id string) ([]byte, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return nil, fmt.Errorf("the result is not a JSON object")
	}
	meta := map[string]json.RawMessage{}
	if m, ok := fields["_meta"]; ok {
		if err := json.Unmarshal(m, &meta); err != nil || meta == nil {
			return nil, fmt.Errorf("the result's _meta is not a JSON object")
		}
	}
	rel, err := json.Marshal(map[string]string{"taskId": id})
	if err != nil {
		return nil, err
	}
	meta[relatedTaskMeta] = rel
	if fields["_meta"], err = json.Marshal(meta); err != nil {
		return nil, err
	}
	return json.Marshal(fields)
}

// listTasks answers tasks/list (2025-11-25): the principal's own tasks,
// newest first, in one page.
func (a *Aggregator) listTasks(ctx context.Context) (any, *jsonrpc.Error) {
	list, err := a.client.Tasks(ctx, "", false)
	if err != nil {
		return nil, a.taskFailure(err)
	}
	out := listV1{Tasks: make([]taskV1, 0, len(list))}
	for _, t := range list {
		out.Tasks = append(out.Tasks, toV1(t))
	}
	return out, nil
}

// cancelTask answers tasks/cancel: the task cancelled (its server gets
// notifications/cancelled); a task that has ended is -32602.
func (a *Aggregator) cancelTask(ctx context.Context, modern bool, id string) (any, *jsonrpc.Error) {
	t, err := a.client.CancelTask(ctx, id)
	if err != nil {
		return nil, a.taskFailure(err)
	}
	if modern {
		return doneV2{ResultType: "complete", Meta: map[string]json.RawMessage{mcp.MetaKeyServerInfo: a.serverInfo}}, nil
	}
	return toV1(t), nil
}

// updateTask answers tasks/update (2026-07-28): input for a task that asked
// for it. The runner's tasks never do (a task's call gets no elicitation
// or sampling), so there is nothing to update: the task must exist and
// be the caller's, and the answer says why it takes no input.
func (a *Aggregator) updateTask(ctx context.Context, id string) (any, *jsonrpc.Error) {
	t, err := a.client.Task(ctx, id)
	if err != nil {
		return nil, a.taskFailure(err)
	}
	return nil, rpcError(jsonrpc.CodeInvalidParams, apierr.Newf(apierr.Conflict,
		"task %s is %s, not input_required: mcpbus tasks never ask for input", t.ID, t.State).WithField("taskId"))
}
