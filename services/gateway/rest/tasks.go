package rest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/approvals"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
)

// TaskListReply is the body of GET /api/v1/tasks.
type TaskListReply struct {
	Tasks []model.Task `json:"tasks"`
}

// taskRef reads the task id of the URL.
func taskRef(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if _, err := uuid.Parse(id); err != nil {
		writeError(w, apierr.Invalid("id", "the task id in the URL must be a uuid"))
		return "", false
	}
	return id, true
}

// createTask answers POST /api/v1/tasks (body: a tool call, by server and
// tool or by namespaced name) with 202 and the task's handle; the runner
// checks the caller's own tool filter, and the approval rules apply, as for
// a call.
func (a *API) createTask(w http.ResponseWriter, r *http.Request) {
	var in model.TaskCreateRequest
	if !decodeBody(w, r, &in) {
		return
	}
	if refused := a.approveTask(w, r, in); refused {
		return
	}
	var (
		task model.Task
		err  error
	)
	if in.Name != "" {
		task, err = a.client.CreateTaskNamed(r.Context(), in.Name, in.Arguments)
	} else {
		task, err = a.client.CreateTask(r.Context(), in.Server, in.Tool, in.Arguments)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Location", "/api/v1/tasks/"+url.PathEscape(task.ID))
	writeJSON(w, http.StatusAccepted, task)
}

// listTasks answers GET /api/v1/tasks?state=&all=.
func (a *API) listTasks(w http.ResponseWriter, r *http.Request) {
	all, err := boolQuery(r, "all")
	if err != nil {
		writeError(w, err)
		return
	}
	list, err := a.client.Tasks(r.Context(), r.URL.Query().Get("state"), all)
	if err != nil {
		writeError(w, err)
		return
	}
	if list == nil {
		list = []model.Task{}
	}
	writeJSON(w, http.StatusOK, TaskListReply{Tasks: list})
}

func (a *API) getTask(w http.ResponseWriter, r *http.Request) {
	id, ok := taskRef(w, r)
	if !ok {
		return
	}
	task, err := a.client.Task(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, task)
}

// taskResult answers GET /api/v1/tasks/{id}/result?wait=: the task with
// its result once final, after waiting up to wait (a Go duration or
// seconds, at most model.TaskMaxWait); a task still working is answered
// 202 with its state, so a client asks again.
func (a *API) taskResult(w http.ResponseWriter, r *http.Request) {
	id, ok := taskRef(w, r)
	if !ok {
		return
	}
	var wait time.Duration
	if v := r.URL.Query().Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			secs, serr := strconv.Atoi(v)
			if serr != nil || secs < 0 {
				writeError(w, apierr.Invalid("wait", "wait must be a duration (30s) or seconds"))
				return
			}
			d = time.Duration(secs) * time.Second
		}
		if d < 0 {
			writeError(w, apierr.Invalid("wait", "wait must not be negative"))
			return
		}
		wait = min(d, model.TaskMaxWait)
	}
	task, err := a.client.TaskResult(r.Context(), id, wait)
	if err != nil {
		writeError(w, err)
		return
	}
	status := http.StatusOK
	if !model.TaskFinal(task.State) {
		status = http.StatusAccepted
	}
	writeJSON(w, status, task)
}

// cancelTask answers DELETE /api/v1/tasks/{id}: the task cancelled (409
// CONFLICT when it has ended).
func (a *API) cancelTask(w http.ResponseWriter, r *http.Request) {
	id, ok := taskRef(w, r)
	if !ok {
		return
	}
	task, err := a.client.CancelTask(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, task)
}

// taskEvents streams a task's events (events.task.<id>, without the
// result: each recorded progress while it works, event "working", then its
// final state) as Server-Sent Events, from the first one retained, with the
// conventions of /api/v1/events. Another principal's task is NOT_FOUND
// before anything is streamed.
func (a *API) taskEvents(w http.ResponseWriter, r *http.Request) {
	id, ok := taskRef(w, r)
	if !ok {
		return
	}
	if _, err := a.client.Task(r.Context(), id); err != nil {
		writeError(w, err)
		return
	}
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy, InactiveThreshold: time.Minute,
		FilterSubjects: []string{a.subj.Event("task", id)}}
	if err := resume(r, &cfg); err != nil {
		writeError(w, err)
		return
	}
	a.stream(w, r, cfg, taskFrame)
}

// taskFrame renders one task event: event: the state, data: the task.
func taskFrame(m jetstream.Msg) (string, bool) {
	var t model.Task
	if err := json.Unmarshal(m.Data(), &t); err != nil || t.State == "" || strings.ContainsAny(t.State, "\r\n:") {
		return "", false
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, m.Data()); err != nil {
		return "", false
	}
	var seq uint64
	if md, err := m.Metadata(); err == nil {
		seq = md.Sequence.Stream
	}
	return fmt.Sprintf("id: %d\nevent: %s\ndata: %s\n\n", seq, t.State, buf.Bytes()), true
}

// approveTask applies the approval rules to a task's call before it is
// made, as /mcp/invoke does to a call: a call they ask about waits for an
// approver; a refused one is answered 403 with the refusal. It reports
// whether it answered.
func (a *API) approveTask(w http.ResponseWriter, r *http.Request, in model.TaskCreateRequest) bool {
	if a.opts.Approvals == nil {
		return false
	}
	name := in.Name
	if name == "" {
		name = model.NamespacedName(in.Server, in.Tool)
	}
	server, _, _ := strings.Cut(name, "__")
	serverTool := in.Tool
	if t, ok := a.catalog.tool(name); ok {
		server = t.Server // a name shortened to 64 characters may have lost its __
		serverTool = t.Tool
	}
	if in.Server != "" {
		server = in.Server
	}
	args := in.Arguments
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	msg, err := a.opts.Approvals.Enforce(r.Context(), approvals.Call{Principal: auth.PrincipalFrom(r.Context()).Bus().ID,
		Server: server, Tool: name, ServerTool: serverTool, Arguments: args, Deferred: true}, nil)
	if err != nil {
		writeError(w, err)
		return true
	}
	if msg != "" {
		auth.WriteError(w, http.StatusForbidden, apierr.New(apierr.Unauthorized, msg))
		return true
	}
	return false
}
