package rest

import (
	"bytes"
	"context"
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
	"github.com/mcpbus/mcpbus/libs/principal"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
)

// TaskListReply is the body of GET /api/v1/tasks.
type TaskListReply struct {
	Tasks []model.Task `json:"tasks"`
}

// taskRef reads the task id of the URL.
func taskRef(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if u, err := uuid.Parse(id); err != nil || u.String() != id { // the canonical form only, as the runners
		writeError(w, apierr.Invalid("id", "the task id in the URL must be a uuid"))
		return "", false
	}
	return id, true
}

// createTask answers POST /api/v1/tasks (body: a tool call, by server and
// tool or by namespaced name) with 202 and the task's handle. As for a call,
// a tool the caller's filter hides does not exist for it (checked here
// first, and again by the runner), and the approval rules apply.
func (a *API) createTask(w http.ResponseWriter, r *http.Request) {
	var in model.TaskCreateRequest
	if !decodeBody(w, r, &in) {
		return
	}
	tool, ok := a.taskTool(w, r, in)
	if !ok {
		return
	}
	if refused := a.approveTask(w, r, tool, in.Arguments); refused {
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

// taskTool is the catalog's entry of the task's tool: named by name, or by
// server and tool (the name wins when both are given, and the catalog, not
// the body, says whose it is). One the caller's filter hides is NOT_FOUND,
// as on /mcp/invoke, before any rule is looked at.
func (a *API) taskTool(w http.ResponseWriter, r *http.Request, in model.TaskCreateRequest) (model.Tool, bool) {
	name, field := strings.TrimSpace(in.Name), "name"
	if name == "" {
		if in.Server == "" || in.Tool == "" {
			// Name the half that is missing when the other is given.
			missing := "name"
			switch {
			case in.Server != "" && in.Tool == "":
				missing = "tool"
			case in.Server == "" && in.Tool != "":
				missing = "server"
			}
			writeError(w, apierr.Invalid(missing, "name, or server and tool, is required"))
			return model.Tool{}, false
		}
		name, field = model.NamespacedName(in.Server, in.Tool), "tool"
	}
	tool, ok := a.visibleTool(r, name)
	if !ok {
		writeError(w, apierr.Newf(apierr.NotFound, "tool %s not found", name).WithField(field))
	}
	return tool, ok
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
// conventions of /api/v1/events. The stream ends after the final state:
// nothing follows it, and an open stream counts against its key's
// MaxStreams. At each heartbeat it reads the task's record too: a final
// state there whose event never came ends it the same way. A task final already is answered with its state alone.
// Another principal's task is NOT_FOUND before anything is streamed.
func (a *API) taskEvents(w http.ResponseWriter, r *http.Request) {
	id, ok := taskRef(w, r)
	if !ok {
		return
	}
	task, err := a.client.Task(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	if model.TaskFinal(task.State) {
		endedTaskEvents(w, task)
		return
	}
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy, InactiveThreshold: time.Minute,
		FilterSubjects: []string{a.subj.Event("task", id)}}
	if err := resume(r, &cfg); err != nil {
		writeError(w, err)
		return
	}
	a.stream(w, r, cfg, taskFrame, func(ctx context.Context) (string, bool) {
		// The runner publishes a task's events without waiting for them
		// to be stored: its final one may be lost (the runner's connection
		// down then, the events stream unavailable), and the stream would
		// stay open for ever. Its record says it ended.
		task, err := a.client.Task(ctx, id)
		if err != nil || !model.TaskFinal(task.State) {
			return "", false
		}
		f, err := taskEndFrame(task)
		return f, err == nil
	})
}

// taskFrame renders one task event: event: the state, data: the task.
func taskFrame(m jetstream.Msg) (string, bool, bool) {
	var t model.Task
	if err := json.Unmarshal(m.Data(), &t); err != nil || t.State == "" || strings.ContainsAny(t.State, "\r\n:") {
		return "", false, false
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, m.Data()); err != nil {
		return "", false, false
	}
	var seq uint64
	if md, err := m.Metadata(); err == nil {
		seq = md.Sequence.Stream
	}
	return fmt.Sprintf("id: %d\nevent: %s\ndata: %s\n\n", seq, t.State, buf.Bytes()), true, model.TaskFinal(t.State)
}

// endedTaskEvents answers the event stream of a task that has ended: its
// state as the stream's one event (from its record: the events retained
// may not hold its end, and a client resuming after it would wait for
// nothing), then the end of the stream.
func endedTaskEvents(w http.ResponseWriter, task model.Task) {
	f, err := taskEndFrame(task)
	if err != nil {
		writeError(w, err)
		return
	}
	sseHeaders(w)
	w.WriteHeader(http.StatusOK)
	_, _ = fmt.Fprint(w, "retry: 2000\n: connected\n\n"+f)
}

// taskEndFrame is the frame of an ended task's state read from its record
// (no event id: it is no event of the stream).
func taskEndFrame(task model.Task) (string, error) {
	data, err := json.Marshal(task.Summary())
	if err != nil {
		return "", apierr.Wrap(apierr.Internal, "encoding the task", err)
	}
	return fmt.Sprintf("event: %s\ndata: %s\n\n", task.State, data), nil
}

// approveTask applies the approval rules to a task's call of tool before
// it is made, as /mcp/invoke does to a call: a call they ask about waits for
// an approver; a refused one is answered 403 with the refusal. It reports
// whether it answered.
func (a *API) approveTask(w http.ResponseWriter, r *http.Request, tool model.Tool, args json.RawMessage) bool {
	if a.opts.Approvals == nil {
		return false
	}
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	msg, err := a.opts.Approvals.Enforce(r.Context(), approvals.Call{Principal: auth.PrincipalFrom(r.Context()).Bus().ID,
		Server: tool.Server, Tool: tool.Name, ServerTool: tool.Tool, Arguments: args, Deferred: true}, nil)
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

// revokedTasksWait bounds cancelling a revoked key's tasks.
const revokedTasksWait = 30 * time.Second

// cancelTasks cancels the tasks of key keyID still working (a task queued,
// waiting for room or an approval, or run again after its runner died would
// otherwise run in the revoked key's name). Every gateway instance is told
// of a revocation and does it: a cancel of a task already ended changes
// nothing.
func (a *API) cancelTasks(keyID string) {
	ctx, cancel := context.WithTimeout(context.Background(), revokedTasksWait)
	defer cancel()
	ctx = principal.With(ctx, principal.Key(keyID, false, model.ToolFilter{}))
	tasks, err := a.client.Tasks(ctx, model.TaskWorking, false)
	if err != nil {
		a.log.Warn("listing the tasks of a revoked key failed: they may still run", "key_id", keyID, "err", err)
		return
	}
	for _, t := range tasks {
		if _, err := a.client.CancelTask(ctx, t.ID); err != nil && apierr.Of(err) != apierr.NotFound {
			a.log.Warn("cancelling a task of a revoked key failed", "key_id", keyID, "task", t.ID, "err", err)
		}
	}
}
