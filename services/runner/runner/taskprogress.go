package runner

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
)

// The progress of a task's call. The call carries the task id as its
// progress token; the server's notifications/progress for it come here
// instead of to a caller's subject (calls.go), and the newest is written
// to the task's record and announced on events.task.<id>, at most once
// per model.TaskProgressEvery: a server that reports a thousand times a
// second costs two writes a second, and the last notification of a burst
// is written when its interval ends, not dropped. Once the call has
// returned nothing more is written: the outcome (with the last progress
// noted) is the record's last change.

// taskProgressKey carries a task run's progress sink (func(model.ProgressEvent)) into call.
type taskProgressKey struct{}

// taskProgressMessageMax bounds a recorded progress message, in characters.
const taskProgressMessageMax = 300

// taskProgressScanMax bounds what of a progress message is kept until it is
// written, in bytes: the scan for secrets sees well past what is recorded,
// so a secret begun within the first taskProgressMessageMax characters is
// whole when scanned (a cut one may match no rule).
const taskProgressScanMax = 16 << 10

// taskProgress throttles one run's progress into its record.
type taskProgress struct {
	every time.Duration
	write func(context.Context, model.TaskProgress) // stores and announces one

	mu      sync.Mutex
	newest  *model.TaskProgress
	pending bool
	kick    chan struct{}
	done    chan struct{}
}

func newTaskProgress(every time.Duration, write func(context.Context, model.TaskProgress)) *taskProgress {
	return &taskProgress{every: every, write: write, kick: make(chan struct{}, 1), done: make(chan struct{})}
}

// note takes one notification. It runs on go-sdk's notification goroutine,
// so it never waits for a write.
func (p *taskProgress) note(tp model.TaskProgress) {
	p.mu.Lock()
	p.newest, p.pending = &tp, true
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default: // a write is already due
	}
}

// run writes what note took, the newest only and at most once per every,
// until ctx ends; then done is closed.
func (p *taskProgress) run(ctx context.Context) {
	defer close(p.done)
	pause := time.NewTimer(p.every)
	pause.Stop()
	defer pause.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
		}
		p.mu.Lock()
		next, due := p.newest, p.pending
		p.pending = false
		p.mu.Unlock()
		if !due {
			continue
		}
		p.write(ctx, *next)
		pause.Reset(p.every)
		select {
		case <-ctx.Done():
			return
		case <-pause.C:
		}
	}
}

// stop ends run (cancel is its context's) and waits for a write under way:
// after it, this run writes no progress.
func (p *taskProgress) stop(cancel context.CancelFunc) {
	cancel()
	<-p.done
}

// last is the newest progress noted, written or not (nil: none).
func (p *taskProgress) last() *model.TaskProgress {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.newest
}

// taskProgressOf is a notification as a task notes it: its message kept
// raw, at most taskProgressScanMax bytes (cleanProgress makes it fit to
// record, once per write rather than once per notification).
func (s *server) taskProgressOf(ev model.ProgressEvent) model.TaskProgress {
	msg := ev.Message
	if len(msg) > taskProgressScanMax {
		msg = strings.ToValidUTF8(msg[:taskProgressScanMax], "")
	}
	return model.TaskProgress{Progress: ev.Progress, Total: ev.Total, Message: msg}
}

// cleanProgress is p as a task records it: its message redacted as a
// server's error text is (its own secrets, the known values, gitleaks'
// rules: the record and events.task.<id> reach more readers than the
// task's principal, and events are kept past the task), one line, cut.
func (s *server) cleanProgress(p model.TaskProgress) model.TaskProgress {
	if p.Message != "" {
		p.Message = s.eventText(s.r.secrets.scrubText(s.redact(p.Message)), taskProgressMessageMax)
	}
	return p
}

// writeTaskProgress stores p in task id's record, unless the task has
// ended (cancelled meanwhile), and announces it.
func (s *server) writeTaskProgress(id string) func(context.Context, model.TaskProgress) {
	return func(ctx context.Context, p model.TaskProgress) {
		// A write under way when the run ends (stop) completes: cancelled
		// mid-request, the store may still apply it, and the record would
		// then hold a progress no event announced.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		p = s.cleanProgress(p)
		changed := false
		out, err := s.r.tasks.updateRecord(ctx, id, func(t *taskRecord) bool {
			changed = !model.TaskFinal(t.State)
			if changed {
				t.Progress = &p
			}
			return changed
		})
		if err != nil {
			s.log.Debug("task progress not recorded", "task", id, "error", err)
			return
		}
		if changed {
			s.r.publishTask(out.Task)
		}
	}
}
