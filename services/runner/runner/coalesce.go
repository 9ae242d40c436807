package runner

import (
	"sync/atomic"
	"time"
)

// toolsRefreshEvery is the least time between two re-reads of a server's
// tools after notifications/tools/list_changed.
const toolsRefreshEvery = 500 * time.Millisecond

// coalescer bounds the work a server's notifications ask for: a malicious
// server may send them without end, and each used to park a goroutine
// until the server's loop took it (memory without bound) and, for
// tools/list_changed, to re-list its tools, each alternating definition a
// tool_changed event and an audit record. Now at most one run waits, and
// runs start at least the given interval apart; a notification while one
// waits is covered by it, one during a run queues the next.
type coalescer struct {
	queued atomic.Bool
	last   atomic.Int64 // unix nanoseconds of the last run's start
}

// notify has schedule called once, now or when every has passed since the
// last run began, unless a run is already waiting. schedule (or what it
// schedules) calls started.
func (t *coalescer) notify(every time.Duration, schedule func()) {
	if !t.queued.CompareAndSwap(false, true) {
		return
	}
	wait := time.Until(time.Unix(0, t.last.Load()).Add(every))
	if wait <= 0 {
		schedule()
		return
	}
	time.AfterFunc(wait, schedule)
}

// started marks a run as begun: the next notification queues another.
func (t *coalescer) started() {
	t.last.Store(time.Now().UnixNano())
	t.queued.Store(false)
}
