package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// A run waits in MCP_TASKS until an owner of its server takes it: a server
// disabled or deleted meanwhile, or one no runner alive will run, has none,
// and its task stayed working until the retention dropped it as NOT_FOUND.
// Every runner sweeps the queue's oldest runs: a task that no run started
// within the task timeout (or whose started run stopped with its runner and
// was not taken up again within it) ends failed. The record's
// compare-and-set decides between the sweep and an owner claiming the run
// at that moment, and between the sweeps of several runners: one of them
// changes it, the others find it final (an owner then acks the run without
// starting it). An owner that claims a run past its bound (a runner back
// after none was alive) fails it the same way instead of starting it: a
// task runs within its bound or never.

// taskSweepEvery is how often the queue is swept: a task ends failed at
// most this long after its bound.
func (r *Runner) taskSweepEvery() time.Duration {
	return min(max(r.opts.TaskTimeout/10, 200*time.Millisecond), time.Minute)
}

// sweepTasks sweeps the queue until ctx ends.
func (r *Runner) sweepTasks(ctx context.Context) {
	t := time.NewTicker(r.taskSweepEvery())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.sweepTaskQueue(ctx)
		}
	}
}

// sweepTaskQueue reads the runs queued longer than the task timeout, oldest
// first: the queue is in the order the tasks were made (a run given back
// keeps its place), so the first younger run ends the sweep and a sweep
// reads no more than the runs it may have to end, and those still running.
func (r *Runner) sweepTaskQueue(ctx context.Context) {
	cutoff := time.Now().Add(-r.opts.TaskTimeout)
	seq := uint64(1)
	for ctx.Err() == nil {
		gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		m, err := r.tasks.stream.GetMsg(gctx, seq, jetstream.WithGetMsgSubject(r.subj.TaskRuns()))
		cancel()
		if err != nil {
			if !errors.Is(err, jetstream.ErrMsgNotFound) && ctx.Err() == nil {
				r.log.Debug("task queue not swept; trying at the next sweep", "error", err)
			}
			return
		}
		if m.Time.After(cutoff) {
			return
		}
		seq = m.Sequence + 1
		r.expireTaskRun(ctx, m)
	}
}

// expireTaskRun ends the task of run m failed if no run started it in
// time, and drops m from the queue once its task is final (or gone): an
// owner would only ack it, and the sweeps would read it again until the
// retention.
func (r *Runner) expireTaskRun(ctx context.Context, m *jetstream.RawStreamMsg) {
	var in taskRunMsg
	if json.Unmarshal(m.Data, &in) != nil || in.ID == "" {
		return // an owner terms it
	}
	now := time.Now()
	changed := false
	uctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	out, err := r.tasks.updateRecord(uctx, in.ID, func(t *taskRecord) bool {
		changed = false
		if model.TaskFinal(t.State) || now.Before(r.taskStartDeadline(t)) {
			return false
		}
		e := r.notStarted(t, r.ownerless(t.Server))
		t.State, t.Message, t.Error = model.TaskFailed, e.Message, e
		changed = true
		return true
	})
	cancel()
	switch {
	case errors.Is(err, errTaskGone):
	case err != nil:
		r.log.Warn("task not swept; trying at the next sweep", "task", in.ID, "error", err)
		return
	case changed:
		r.log.Warn("task ended failed: no run started it in time", "task", out.ID, "server", out.Server, "reason", out.Message)
		r.publishTask(out.Task)
	case !model.TaskFinal(out.State):
		return // its run goes on, or is given back, within its bound
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := r.tasks.stream.DeleteMsg(dctx, m.Sequence); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		r.log.Debug("ended task's run not dropped from the queue; an owner acks it", "task", in.ID, "error", err)
	}
}

// taskStartDeadline is when a working task no run holds ends failed: the
// task timeout after it was made, for a task never started; for one whose
// run started, the task timeout after its run's own end (the run is
// bounded by the task timeout, its outcome is written then unless its
// runner stopped, and a run given back is delivered again after the ack
// wait).
func (r *Runner) taskStartDeadline(t *taskRecord) time.Time {
	if t.Attempts == 0 {
		return t.CreatedAt.Add(r.opts.TaskTimeout)
	}
	since := t.ClaimedAt
	if since.IsZero() { // written before claims were dated
		since = t.UpdatedAt
	}
	return since.Add(2*r.opts.TaskTimeout + r.opts.TaskAckWait)
}

// notStarted is the failure of a task no run started within its bound;
// why says what the runner deciding it knows of the server's owners.
func (r *Runner) notStarted(t *taskRecord, why string) *apierr.Error {
	if t.Attempts == 0 {
		return apierr.Newf(apierr.ServiceUnavailable, "the task was not started within %s (the task timeout): %s", r.opts.TaskTimeout, why).WithField("server")
	}
	return apierr.Newf(apierr.ServiceUnavailable, "the runner running this task (%s) stopped mid-call and no runner took the task up again within %s (the task timeout): %s",
		t.Runner, r.opts.TaskTimeout, why).WithField("server")
}

// ownerless says why server slug's owners did not take a run up.
func (r *Runner) ownerless(slug string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.desired[slug]; !ok {
		for _, s := range r.byID {
			if s == slug {
				return fmt.Sprintf("server %s is disabled", slug)
			}
		}
		return fmt.Sprintf("server %s has no config (deleted)", slug)
	}
	for key := range r.owners {
		if strings.HasPrefix(key, leasePrefix+slug+".") {
			return fmt.Sprintf("the owners of server %s did not take it up (all its calls in use, max_inflight, or stopping)", slug)
		}
	}
	return fmt.Sprintf("no runner runs server %s (none alive that accepts it)", slug)
}
