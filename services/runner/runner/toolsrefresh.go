package runner

import (
	"sync/atomic"
	"time"
)

// toolsRefreshEvery is the least time between two re-reads of a server's
// tools after notifications/tools/list_changed.
const toolsRefreshEvery = 500 * time.Millisecond

// toolsRefresh coalesces a server's notifications/tools/list_changed: a
// malicious server may send them without end, and each used to park a
// goroutine until the server's loop took it (memory without bound) and to
// re-list its tools, each alternating definition a tool_changed event and
// an audit record. Now at most one refresh waits, and refreshes start at
// least toolsRefreshEvery apart; a notification while one waits is covered
// by it, one during a refresh queues the next.
type toolsRefresh struct {
	queued atomic.Bool
	last   atomic.Int64 // unix nanoseconds of the last refresh's start
}

// notify has schedule called once, now or when the interval since the last
// refresh has passed, unless a refresh is already waiting.
func (t *toolsRefresh) notify(schedule func()) {
	if !t.queued.CompareAndSwap(false, true) {
		return
	}
	wait := time.Until(time.Unix(0, t.last.Load()).Add(toolsRefreshEvery))
	if wait <= 0 {
		schedule()
		return
	}
	time.AfterFunc(wait, schedule)
}

// started marks a refresh as begun: the next notification queues another.
func (t *toolsRefresh) started() {
	t.last.Store(time.Now().UnixNano())
	t.queued.Store(false)
}
