package runner

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
)

// taskTimeoutKey carries a task's own time limit into call, in place of
// the call timeout (a task is meant to outlast an ordinary call).
type taskTimeoutKey struct{}

// taskPull is how many runs one owner holds at once: the rest wait in the
// queue for it or for another replica.
const taskPull = 8

// runTasks consumes this server's task runs while the server is owned
// here: one durable consumer per server, shared by its replicas, so a run
// held by a runner that dies is delivered again (after the ack wait) to
// whichever owner pulls next.
func (s *server) runTasks() {
	r := s.r
	for s.ctx.Err() == nil {
		ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
		cons, err := r.js.CreateOrUpdateConsumer(ctx, bus.StreamTasks, jetstream.ConsumerConfig{
			Durable: "task-" + s.slug, FilterSubject: r.subj.TaskRun(s.slug),
			AckPolicy: jetstream.AckExplicitPolicy, AckWait: r.opts.TaskAckWait,
			InactiveThreshold: r.tasks.retention + time.Hour, MaxAckPending: 1024,
		})
		cancel()
		if err != nil {
			s.log.Warn("task queue not consumed; trying again", "error", err)
			select {
			case <-s.ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		cc, err := cons.Consume(func(msg jetstream.Msg) { go s.runTask(msg) }, jetstream.PullMaxMessages(taskPull))
		if err != nil {
			s.log.Warn("task queue not consumed; trying again", "error", err)
			time.Sleep(time.Second)
			continue
		}
		<-s.ctx.Done()
		cc.Stop()
	}
}

// notRerun is why a task whose runner stopped mid-call ends failed.
func notRerun(t *taskRecord) string {
	if t.Idempotent {
		return fmt.Sprintf("the runner running this task (%s) stopped mid-call twice; an idempotent tool is run again once only", t.Runner)
	}
	return fmt.Sprintf("the runner running this task (%s) stopped mid-call; the tool is not marked idempotent (idempotentHint), so it was not run again", t.Runner)
}

// runTask runs one task: a run asked for the first time runs; one already
// started (its runner died or handed the server over mid-call) runs again
// only for an idempotent tool, once, else it fails saying why.
func (s *server) runTask(msg jetstream.Msg) {
	r := s.r
	var in taskRunMsg
	if json.Unmarshal(msg.Data(), &in) != nil || in.ID == "" {
		_ = msg.Term()
		return
	}
	if s.full() {
		// Wait for room rather than fail on max_inflight; not an attempt.
		_ = msg.NakWithDelay(time.Second)
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	var failedHere bool
	rec, err := r.tasks.updateRecord(ctx, in.ID, func(t *taskRecord) bool {
		switch {
		case model.TaskFinal(t.State): // cancelled while queued, or done
			return false
		case t.Attempts > 0 && (!t.Idempotent || t.Attempts >= 2):
			t.State, t.Message = model.TaskFailed, notRerun(t)
			t.Error = apierr.New(apierr.ServiceUnavailable, t.Message)
			failedHere = true
			return true
		case !time.Now().Before(r.taskStartDeadline(t)):
			// Past its bound (taskexpire.go): a sweep would fail it; so
			// does its first claim, as whoever comes first.
			t.Error = r.notStarted(t, fmt.Sprintf("no owner of server %s took it up in time", t.Server))
			t.State, t.Message = model.TaskFailed, t.Error.Message
			failedHere = true
			return true
		}
		t.Attempts++
		t.Runner, t.ClaimedAt = r.opts.ID, time.Now().UTC()
		return true
	})
	cancel()
	switch {
	case errors.Is(err, errTaskGone): // past retention
		_ = msg.Ack()
		return
	case errors.Is(err, errTaskStoreFull):
		// The claim (a record a little larger) finds the bucket full: the
		// task fails now, saying so, rather than wait for room until its
		// start deadline.
		s.failTask(msg, in.ID, storeFull("the task could not be started"))
		return
	case err != nil:
		if s.ctx.Err() == nil {
			_ = msg.NakWithDelay(time.Second)
		}
		return
	case failedHere:
		r.publishTask(rec.Task)
		_ = msg.Ack()
		return
	case model.TaskFinal(rec.State):
		_ = msg.Ack()
		return
	}
	if rec.Attempts > 1 {
		s.log.Warn("task run again after its runner stopped mid-call (idempotent tool)", "task", rec.ID, "tool", rec.Tool)
	}

	tctx, stop := context.WithTimeout(context.WithValue(s.ctx, taskTimeoutKey{}, r.opts.TaskTimeout), r.opts.TaskTimeout)
	defer stop()
	done := make(chan struct{})
	go s.keepTask(tctx, stop, msg, rec.ID, done)
	prog := newTaskProgress(model.TaskProgressEvery, s.writeTaskProgress(rec.ID))
	pctx, pstop := context.WithCancel(tctx)
	go prog.run(pctx)
	h := nats.Header{bus.HeaderRequestID: []string{rec.ID}}
	if rec.PrincipalHeader != "" {
		h.Set(principal.Header, rec.PrincipalHeader)
	}
	record := func(ev model.ProgressEvent) { prog.note(s.taskProgressOf(ev)) }
	sctx, span := s.startTaskRun(msg, rec.ID)
	// The run's deadline and cancellation are tctx's; its trace is sctx's.
	cctx := trace.ContextWithSpan(context.WithValue(tctx, taskProgressKey{}, record), trace.SpanFromContext(sctx))
	start := time.Now()
	res, tool, callErr := s.call(cctx, caller{}, h, model.ToolToken(rec.Tool), rec.Args)
	end := time.Now()
	endTaskRun(span, callErr)
	prog.stop(pstop) // no progress write after this: the outcome is the last
	close(done)
	var full inflightFull
	if errors.As(callErr, &full) {
		// The call never reached the server (ordinary calls took the room):
		// not an attempt; the run waits in the queue.
		s.requeueRun(msg, rec.ID)
		return
	}
	// The run was a call (the room check above aside): it has a call event,
	// and so an audit record, as a call on the bus has, with the task's
	// principal and its id as the request id.
	outcome, errText := s.callOutcome(res, callErr)
	s.count(outcome)
	s.recordCall(cctx, caller{}, h, cmp.Or(tool, rec.Tool), traceID(span), start, end, res, callErr, outcome, errText)
	if s.ctx.Err() != nil {
		// This server is going away here (handed over, lease lost, runner
		// stopping): the next owner gets the run and applies the rule above.
		_ = msg.Nak()
		return
	}
	if errors.Is(callErr, errRestartCut) && rec.Idempotent {
		// Cut by a restart in place (restartInPlace: a changed config, a
		// requested restart): the operator's doing, not the server's nor the runner's, so it is not
		// an attempt; the tool is safe to run again, so the run goes back to
		// the queue and runs on the new session. Any other tool's task
		// fails below with the restart's error: it may have run.
		s.requeueRun(msg, rec.ID)
		return
	}
	last := prog.last()
	if last != nil {
		clean := s.cleanProgress(*last)
		last = &clean
	}
	s.finishTask(msg, rec.ID, res, callErr, last)
}

// requeueRun puts a run back in the queue without counting it as an
// attempt of its task.
func (s *server) requeueRun(msg jetstream.Msg, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, _ = s.r.tasks.updateRecord(ctx, id, func(t *taskRecord) bool {
		if model.TaskFinal(t.State) || t.Attempts == 0 {
			return false
		}
		t.Attempts--
		return true
	})
	cancel()
	_ = msg.NakWithDelay(time.Second)
}

// full reports whether the server runs as many calls as it may at once.
func (s *server) full() bool {
	s.mu.RLock()
	cfg := s.cfg
	s.mu.RUnlock()
	return cfg != nil && s.active.Load() >= int64(maxInflight(cfg, s.r.opts.MaxInflight))
}

// finishTask writes a run's outcome, with the last progress the run noted
// (nil: none), unless the task is final already (cancelled meanwhile),
// announces it and acks the run.
func (s *server) finishTask(msg jetstream.Msg, id string, res callReply, callErr error, progress *model.TaskProgress) {
	r := s.r
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	outcome := func(t *taskRecord) {
		if progress != nil {
			t.Progress = progress
		}
		switch {
		case callErr == nil:
			t.State, t.Result = model.TaskCompleted, res.data
		default:
			e := apierr.From(callErr)
			t.State, t.Message, t.Error = model.TaskFailed, e.Message, e
		}
	}
	changed := false
	out, err := r.tasks.updateRecord(ctx, id, func(t *taskRecord) bool {
		if model.TaskFinal(t.State) {
			return false
		}
		outcome(t)
		changed = true
		return true
	})
	if errors.Is(err, errTaskTooLarge) || errors.Is(err, errTaskStoreFull) {
		callErr, res = r.tasks.tooLarge(), callReply{}
		if errors.Is(err, errTaskStoreFull) {
			callErr = storeFull("the result could not be kept")
		}
		changed = false
		out, err = r.tasks.updateRecord(ctx, id, func(t *taskRecord) bool {
			if model.TaskFinal(t.State) {
				return false
			}
			outcome(t)
			changed = true
			return true
		})
	}
	if errors.Is(err, errTaskStoreFull) {
		// Not even the failure fits: running the tool again would not
		// either. The record stays as it is until it expires.
		s.log.Warn("task outcome not stored: the task store is full", "task", id)
		_ = msg.Term()
		return
	}
	if err != nil && !errors.Is(err, errTaskGone) {
		s.log.Warn("task outcome not stored; the run is delivered again", "task", id, "error", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	if changed {
		r.publishTask(out.Task)
	}
	_ = msg.Ack()
}

// failTask ends a task failed with failure before its run, unless it is
// final already, announces it and acks the run; a failure that cannot be
// stored either (the store full) ends the run's delivery all the same.
func (s *server) failTask(msg jetstream.Msg, id string, failure error) {
	r := s.r
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e := apierr.From(failure)
	changed := false
	out, err := r.tasks.updateRecord(ctx, id, func(t *taskRecord) bool {
		if model.TaskFinal(t.State) {
			return false
		}
		t.State, t.Message, t.Error = model.TaskFailed, e.Message, e
		changed = true
		return true
	})
	switch {
	case err == nil && changed:
		r.publishTask(out.Task)
	case err != nil && !errors.Is(err, errTaskGone):
		s.log.Warn("task failure not stored", "task", id, "error", err)
	}
	_ = msg.Term()
}

// keepTask holds the run while it goes on: it tells JetStream the run is
// in progress (so it is not delivered again before the ack wait after the
// last sign of life), keeps the record within its retention, and stops the
// call when the record says it ended: cancelled (a cancel that came before
// the call was registered, or whose broadcast was lost), or failed by a
// sweep that found no run had held it in time (taskexpire.go).
func (s *server) keepTask(ctx context.Context, stop context.CancelFunc, msg jetstream.Msg, id string, done <-chan struct{}) {
	r := s.r
	tick := time.NewTicker(min(r.opts.TaskAckWait/3, time.Second))
	defer tick.Stop()
	lastTouch := time.Now()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		_ = msg.InProgress()
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		rec, _, err := r.tasks.getRecord(rctx, id)
		if err == nil && model.TaskFinal(rec.State) { // cancelled, or failed by a sweep (taskexpire.go)
			cancel()
			stop()
			return
		}
		if err == nil && time.Since(lastTouch) > r.tasks.retention/3 {
			out, err := r.tasks.updateRecord(rctx, id, func(t *taskRecord) bool { return !model.TaskFinal(t.State) })
			if err == nil && !model.TaskFinal(out.State) {
				// The owner entry has the bucket's TTL too: a run longer than
				// the retention would otherwise drop out of its principal's
				// list, of the count of its bound and of the cancel that
				// revoking its key makes (those read owner entries).
				_, _ = r.tasks.kv.Put(rctx, ownerKeys(out.Principal)+id, []byte("1"))
			}
			lastTouch = time.Now()
		}
		cancel()
	}
}
