package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
)

// taskEndpoints serve task.* on the runners' queue group: any runner
// answers; the run itself goes to the server's owner through the work queue.
func (r *Runner) taskEndpoints() []bus.Endpoint {
	return []bus.Endpoint{
		{Name: "task-create", Subject: r.subj.Task("create"), Handler: r.taskHandler(r.handleTaskCreate)},
		{Name: "task-get", Subject: r.subj.Task("get"), Handler: r.taskHandler(r.handleTaskGet)},
		{Name: "task-result", Subject: r.subj.Task("result"), Handler: r.taskHandler(r.handleTaskResult)},
		{Name: "task-cancel", Subject: r.subj.Task("cancel"), Handler: r.taskHandler(r.handleTaskCancel)},
		{Name: "task-list", Subject: r.subj.Task("list"), Handler: r.taskHandler(r.handleTaskList)},
	}
}

// taskRequestTimeout bounds a task request whose caller gave no time (a
// task.result wait included); with Mcp-Timeout-Ms the caller's time does.
const taskRequestTimeout = model.TaskMaxWait + 15*time.Second

// taskHandler bounds h, so a slow JetStream never leaves a request unanswered.
func (r *Runner) taskHandler(h bus.HandlerFunc) micro.Handler {
	return bus.JSONHandler(r.log, func(ctx context.Context, req micro.Request) (any, error) {
		d := taskRequestTimeout
		if ct := bus.CallerTimeout(nats.Header(req.Headers())); ct > 0 {
			d = ct
		}
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return h(ctx, req)
	})
}

// taskRunMsg is the body of a work-queue message: which task to run.
type taskRunMsg struct {
	ID string `json:"id"`
}

// catalogTool finds the tool a create names in the catalog. A server whose
// tools are not known yet (a lazy server never started: its first start,
// which lists them, not yet done) is started first, as a call of the tool
// starts it, so that the create is decided on the tools it has.
func (r *Runner) catalogTool(ctx context.Context, p principal.Principal, h nats.Header, in model.TaskCreateRequest) (model.Tool, error) {
	server, tool := in.Server, in.Tool
	if in.Name != "" {
		s, _, ok := strings.Cut(in.Name, "__")
		if !ok || !model.ValidSlug(s) {
			// A name shortened to 64 characters (a long slug) may have lost
			// its "__" to the hash suffix: such a name is one if listed.
			if t, found := r.listedTool(in.Name); found {
				return t, nil
			}
			return model.Tool{}, apierr.Invalid("name", "a namespaced tool name looks like <server>__<tool>")
		}
		server = s
	}
	if !model.ValidSlug(server) {
		return model.Tool{}, apierr.Invalid("server", "server must be a slug ([a-z0-9_-])")
	}
	if in.Name == "" && tool == "" {
		return model.Tool{}, apierr.Invalid("tool", "tool is required")
	}
	t, known, found := r.storedTool(ctx, server, in)
	if found {
		return t, nil
	}
	name := in.Name
	if name == "" {
		name = model.NamespacedName(server, tool)
	}
	// A tool the caller's own filter hides is unknown to it (createTask):
	// it starts nothing.
	if !known && r.wanted(server) && p.AllowsTool(model.ToolNames(name, server, tool)...) {
		if err := r.startForTask(ctx, h, server); err != nil {
			return model.Tool{}, err
		}
		if t, found = r.startedTool(ctx, server, in); found {
			return t, nil
		}
	}
	return model.Tool{}, apierr.Newf(apierr.NotFound, "server %s has no tool %q", server, in.Name+tool)
}

// storedTool finds the tool in in the catalog of server: known tells
// whether the server has a catalog at all (its tools were listed).
func (r *Runner) storedTool(ctx context.Context, server string, in model.TaskCreateRequest) (t model.Tool, known, found bool) {
	r.mu.Lock()
	cat, known := r.catalog[server]
	r.mu.Unlock()
	if t, ok := findTool(cat.Tools, in); ok {
		return t, true, true
	}
	// This runner's copy follows KV mcp_tools through a watch: a server that
	// another runner has just started may not be in it yet, so the stored
	// catalog decides before the tool is called unknown.
	e, err := r.assets.Tools.Get(ctx, server)
	if err == nil {
		known = true
		var stored model.Catalog
		if json.Unmarshal(e.Value(), &stored) == nil {
			if t, ok := findTool(stored.Tools, in); ok {
				return t, true, true
			}
		}
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		known = true // unreadable: not a reason to start the server
	}
	return model.Tool{}, known, false
}

// wanted reports whether server has an enabled config (a task of it may
// start it), as this runner knows.
func (r *Runner) wanted(server string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, desired := r.desired[server]
	_, owned := r.servers[server]
	return desired || owned
}

// startForTask starts server where it is owned, as a call would (lazy
// start): a ping on its rpc subject, which starts an idle server or waits
// for a start under way, for the principal of h. The ping's failure (the
// start's) is the create's answer, as it is a call's.
func (r *Runner) startForTask(ctx context.Context, h nats.Header, server string) error {
	r.mu.Lock()
	cfg := r.desired[server]
	if s, ok := r.servers[server]; ok {
		cfg = s.config()
	}
	r.mu.Unlock()
	wait := r.opts.StartTimeout
	if cfg != nil {
		wait = cfg.Runtime.StartTimeout.Or(wait)
	}
	// The start, then the ping itself.
	ctx, cancel := context.WithTimeout(ctx, wait+5*time.Second)
	defer cancel()
	msg := nats.NewMsg(r.subj.RPC(server))
	msg.Header.Set(bus.HeaderRequestID, h.Get(bus.HeaderRequestID))
	if ph := h.Get(principal.Header); ph != "" {
		msg.Header.Set(principal.Header, ph)
	}
	msg.Data, _ = json.Marshal(model.RPCRequest{Method: "ping"})
	if _, err := bus.Request(ctx, r.nc, msg, 0); err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return apierr.Newf(apierr.ServiceUnavailable, "no runner owns server %s", server)
		}
		return err
	}
	return nil
}

// startedTool finds the tool in in the catalog of server once its start
// (startForTask) is done: the catalog is written by the start, but may
// reach this runner a little later (another runner's write retried in the
// background, a lagging replica), so it is awaited briefly.
func (r *Runner) startedTool(ctx context.Context, server string, in model.TaskCreateRequest) (model.Tool, bool) {
	if t, known, found := r.storedTool(ctx, server, in); known {
		return t, found
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	data, _, err := bus.AwaitKV(wctx, r.assets.Tools, server, func([]byte) (bool, error) { return true, nil })
	var cat model.Catalog
	if err != nil || json.Unmarshal(data, &cat) != nil {
		return model.Tool{}, false
	}
	return findTool(cat.Tools, in)
}

// listedTool is the tool of this runner's catalog listed under name.
func (r *Runner) listedTool(name string) (model.Tool, bool) {
	if !model.ValidName(name) {
		return model.Tool{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.catalog {
		for _, t := range c.Tools {
			if t.Name == name {
				return t, true
			}
		}
	}
	return model.Tool{}, false
}

// findTool is the tool of tools a create names (namespaced, or by its name).
func findTool(tools []model.Tool, in model.TaskCreateRequest) (model.Tool, bool) {
	for _, t := range tools {
		if (in.Name != "" && t.Name == in.Name) || (in.Name == "" && t.Tool == in.Tool) {
			return t, true
		}
	}
	return model.Tool{}, false
}

// idempotent reads a tool's idempotentHint.
func idempotent(t model.Tool) bool {
	var a struct {
		IdempotentHint bool `json:"idempotentHint"`
	}
	return len(t.Annotations) > 0 && json.Unmarshal(t.Annotations, &a) == nil && a.IdempotentHint
}

// taskCaller is the principal a task request acts for. Agents have no task
// subjects (libs/access), so this is the gateway's header or the operator.
func taskCaller(req micro.Request) (principal.Principal, error) {
	p, err := principal.FromHeader(nats.Header(req.Headers()))
	if err != nil {
		return p, apierr.Invalid("", "the principal header does not decode")
	}
	return p, nil
}

func (r *Runner) handleTaskCreate(ctx context.Context, req micro.Request) (any, error) {
	var in model.TaskCreateRequest
	if err := bus.Decode(req.Data(), &in); err != nil {
		return nil, err
	}
	return r.createTask(ctx, nats.Header(req.Headers()), in)
}

// createTask makes the task in asks for, for the principal of h, and queues its run.
func (r *Runner) createTask(ctx context.Context, h nats.Header, in model.TaskCreateRequest) (model.Task, error) {
	p, err := principal.FromHeader(h)
	if err != nil {
		return model.Task{}, apierr.Invalid("", "the principal header does not decode")
	}
	if err := checkArgs(in.Arguments, r.opts.MaxArgsBytes); err != nil {
		return model.Task{}, err
	}
	tool, err := r.catalogTool(ctx, p, h, in)
	if err != nil {
		return model.Task{}, err
	}
	if !p.AllowsTool(model.ToolNames(tool.Name, tool.Server, tool.Tool)...) { // the caller's own filter hides it: as unknown
		return model.Task{}, apierr.Newf(apierr.NotFound, "server %s has no tool %q", tool.Server, tool.Tool)
	}
	now := time.Now().UTC()
	task := model.Task{ID: uuid.NewString(), State: model.TaskWorking, Server: tool.Server, Tool: tool.Tool, Name: tool.Name,
		Principal: p.ID, Idempotent: idempotent(tool), CreatedAt: now, UpdatedAt: now, TTLMs: r.tasks.retention.Milliseconds()}
	args := in.Arguments
	if len(trimJSONSpace(args)) == 0 {
		args = emptyObject
	}
	rec := taskRecord{Task: task, Args: args, PrincipalHeader: h.Get(principal.Header)}
	data, err := json.Marshal(rec)
	if err != nil {
		return model.Task{}, apierr.Wrap(apierr.Internal, "encoding the task", err)
	}
	if err := r.tasks.checkQuota(ctx, p.ID, r.opts.TaskMaxPerPrincipal); err != nil {
		return model.Task{}, err
	}
	owner := ownerKeys(p.ID) + task.ID
	if _, err := r.tasks.kv.Create(ctx, owner, []byte("1")); err != nil {
		return model.Task{}, storingTask(err)
	}
	if _, err := r.tasks.kv.Create(ctx, task.ID, data); err != nil {
		_ = r.tasks.kv.Delete(context.WithoutCancel(ctx), owner)
		return model.Task{}, storingTask(err)
	}
	run, _ := json.Marshal(taskRunMsg{ID: task.ID})
	// The message id makes a retried publish count once.
	if _, err := r.js.PublishMsg(ctx, taskRunMessage(ctx, r.subj.TaskRun(tool.Server), run), jetstream.WithMsgID(task.ID)); err != nil {
		_ = r.tasks.kv.Delete(context.WithoutCancel(ctx), task.ID)
		_ = r.tasks.kv.Delete(context.WithoutCancel(ctx), owner)
		return model.Task{}, apierr.Wrap(apierr.ServiceUnavailable, "queueing the task", err)
	}
	return task, nil
}

// storingTask is a refused write of a new task: the store full says so
// (it said "storing the task" and nothing of why).
func storingTask(err error) error {
	if bus.StoreFull(err) {
		return storeFull("no new task is taken")
	}
	return apierr.Wrap(apierr.ServiceUnavailable, "storing the task: "+err.Error(), err)
}

// visibleTask reads a task for p: another principal's (unless p is admin)
// is NOT_FOUND, as a task that never was.
func (r *Runner) visibleTask(ctx context.Context, p principal.Principal, id string) (taskRecord, error) {
	// Only the canonical form is a record's key: the others uuid.Parse
	// takes (urn:uuid:…, braces) are keys the bucket refuses.
	if u, err := uuid.Parse(id); err != nil || u.String() != id {
		return taskRecord{}, apierr.Invalid("id", "id must be a task id (a lower-case uuid, 8-4-4-4-12)")
	}
	rec, _, err := r.tasks.getRecord(ctx, id)
	if errors.Is(err, errTaskGone) || (err == nil && rec.Principal != p.ID && !p.Admin) {
		return taskRecord{}, apierr.Newf(apierr.NotFound, "task %s not found", id).WithField("id")
	}
	return rec, err
}

func (r *Runner) taskRequest(req micro.Request) (principal.Principal, model.TaskRequest, error) {
	var in model.TaskRequest
	p, err := taskCaller(req)
	if err == nil {
		err = bus.Decode(req.Data(), &in)
	}
	return p, in, err
}

func (r *Runner) handleTaskGet(ctx context.Context, req micro.Request) (any, error) {
	p, in, err := r.taskRequest(req)
	if err != nil {
		return nil, err
	}
	rec, err := r.visibleTask(ctx, p, in.ID)
	if err != nil {
		return nil, err
	}
	return rec.Task.Summary(), nil
}

// handleTaskResult answers the task with its result once it is final,
// waiting up to wait_ms for that; a task still working after the wait is
// answered as it is (state working, no result).
func (r *Runner) handleTaskResult(ctx context.Context, req micro.Request) (any, error) {
	p, in, err := r.taskRequest(req)
	if err != nil {
		return nil, err
	}
	rec, err := r.visibleTask(ctx, p, in.ID)
	if err != nil || model.TaskFinal(rec.State) || in.WaitMs <= 0 {
		return rec.Task, err
	}
	wait := min(time.Duration(in.WaitMs)*time.Millisecond, model.TaskMaxWait)
	if ct := bus.CallerTimeout(nats.Header(req.Headers())); ct > 0 && ct < wait {
		wait = ct
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	w, err := r.tasks.kv.Watch(wctx, in.ID)
	if err != nil {
		return nil, apierr.Wrap(apierr.ServiceUnavailable, "watching the task", err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return rec.Task, nil
			}
			if e == nil { // the current value has been given
				continue
			}
			if e.Operation() != jetstream.KeyValuePut {
				return nil, apierr.Newf(apierr.NotFound, "task %s not found", in.ID).WithField("id")
			}
			var next taskRecord
			if json.Unmarshal(e.Value(), &next) == nil {
				rec = next
			}
			if model.TaskFinal(rec.State) {
				return rec.Task, nil
			}
		case <-wctx.Done():
			return rec.Task, nil
		}
	}
}

// handleTaskCancel asks the run to stop: the record says cancelled at once
// (a queued run is then skipped), and the server's owners hear the normal
// cancel of the call, which sends notifications/cancelled to the server.
func (r *Runner) handleTaskCancel(ctx context.Context, req micro.Request) (any, error) {
	p, in, err := r.taskRequest(req)
	if err != nil {
		return nil, err
	}
	rec, err := r.visibleTask(ctx, p, in.ID)
	if err != nil {
		return nil, err
	}
	if model.TaskFinal(rec.State) {
		return nil, apierr.Newf(apierr.Conflict, "task %s is already %s", in.ID, rec.State).WithField("id")
	}
	var final bool
	out, err := r.tasks.updateRecord(ctx, in.ID, func(t *taskRecord) bool {
		if model.TaskFinal(t.State) {
			final = true
			return false
		}
		t.State, t.Message = model.TaskCancelled, "cancelled by "+p.ID
		t.Error = apierr.New(apierr.Network, "Tool call cancelled by the caller")
		return true
	})
	if err != nil {
		return nil, err
	}
	if final {
		return nil, apierr.Newf(apierr.Conflict, "task %s is already %s", in.ID, out.State).WithField("id")
	}
	body, _ := json.Marshal(cancelRequest{RequestID: in.ID})
	if err := r.nc.Publish(r.subj.Cancel(out.Server), body); err != nil {
		r.log.Warn("task cancel not sent to the server's owners", "task", in.ID, "error", err)
	}
	r.publishTask(out.Task)
	return out.Task.Summary(), nil
}

func (r *Runner) handleTaskList(ctx context.Context, req micro.Request) (any, error) {
	p, err := taskCaller(req)
	if err != nil {
		return nil, err
	}
	var in model.TaskListRequest
	if err := bus.Decode(req.Data(), &in); err != nil {
		return nil, err
	}
	if in.All && !p.Admin {
		return nil, apierr.Invalid("all", "only an admin may list every principal's tasks")
	}
	// An unknown state would match no task: an empty list would say there
	// are none, when the filter was misspelt.
	switch in.State {
	case "", model.TaskWorking, model.TaskCompleted, model.TaskFailed, model.TaskCancelled:
	default:
		return nil, apierr.Invalid("state", fmt.Sprintf("state must be %s, %s, %s or %s", model.TaskWorking, model.TaskCompleted, model.TaskFailed, model.TaskCancelled))
	}
	// A principal's tasks are found by their owner entries: reading every
	// record (up to 4 MiB each, every principal's) made one list slow for all.
	own := ownerKeys(p.ID)
	var keys jetstream.KeyLister
	if in.All {
		keys, err = r.tasks.kv.ListKeys(ctx)
	} else {
		keys, err = r.tasks.kv.ListKeysFiltered(ctx, own+"*")
	}
	if err != nil {
		return nil, apierr.Wrap(apierr.ServiceUnavailable, "listing tasks", err)
	}
	out := model.TaskListReply{Tasks: []model.Task{}}
	for key := range keys.Keys() {
		id, mine := strings.CutPrefix(key, own)
		if !mine && isOwnerKey(key) || mine && in.All {
			continue // every record is listed once, by its own key
		}
		rec, _, err := r.tasks.getRecord(ctx, id)
		if err != nil {
			continue // expired between the listing and the read
		}
		if (rec.Principal == p.ID || in.All) && (in.State == "" || rec.State == in.State) {
			out.Tasks = append(out.Tasks, rec.Task.Summary())
		}
	}
	slices.SortFunc(out.Tasks, func(a, b model.Task) int { return b.CreatedAt.Compare(a.CreatedAt) })
	return out, nil
}

// publishTask announces a task's change on events.task.<id>: the summary,
// never the result (events reach more readers than the task's principal).
func (r *Runner) publishTask(t model.Task) {
	data, _ := json.Marshal(t.Summary())
	if err := r.nc.Publish(r.subj.Event("task", t.ID), data); err != nil {
		r.log.Warn("task event not published", "task", t.ID, "error", err)
	}
}
