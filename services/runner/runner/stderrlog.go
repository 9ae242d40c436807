package runner

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"golang.org/x/time/rate"
)

// The bounds of a server's stderr in the runner's log. A server writes what
// it likes to its stderr, as fast as it likes: unbounded, each line was a
// log record of up to the tail's 64 KiB and more, as many a second as the
// server wrote, on the disk of whoever keeps the runner's logs.
const (
	stderrLineMax   = 4 << 10 // bytes of a line's record, "…" marking the cut
	stderrBurst     = 200     // lines relayed at once (a start's output)
	stderrPerSecond = 20      // lines relayed a second past the burst
)

// logBudget bounds the records of one kind a server makes the runner log:
// those its rate allows, the rest only counted, for the next record logged
// to say. A server chooses how often some things happen (a stderr line, a
// list_changed), and each was a record.
type logBudget struct {
	lim     *rate.Limiter
	dropped atomic.Int64 // records dropped since the last one logged
}

func newLogBudget(every rate.Limit, burst int) *logBudget {
	return &logBudget{lim: rate.NewLimiter(every, burst)}
}

// take reports whether the next record is to be logged; when it is not, it
// counts it and returns the count of those dropped so far.
func (b *logBudget) take() (bool, int64) {
	if b.lim.Allow() {
		return true, 0
	}
	return false, b.dropped.Add(1)
}

// held returns the count of the records dropped since the last one logged,
// and starts it over: the record being logged says it.
func (b *logBudget) held() int64 { return b.dropped.Swap(0) }

// refreshFailEvery spaces the records of a server's failed tool re-lists
// (refreshTools): the first is logged, then one a minute with the count of
// those not logged. A server whose list the runner cannot take, sending
// list_changed in a loop, failed a re-list twice a second for as long as it
// ran, each a WARN.
const refreshFailEvery = time.Minute

// stderrLog relays one server's stderr lines to the runner's debug log,
// across its restarts (a crash loop does not refill the burst).
type stderrLog struct {
	log *slog.Logger
	*logBudget
}

func newStderrLog(log *slog.Logger) *stderrLog {
	return &stderrLog{log: log, logBudget: newLogBudget(stderrPerSecond, stderrBurst)}
}

// wanted reports whether the next line is to be relayed: debug is on and
// the rate allows it. It is asked before the line is redacted, so a line
// dropped costs nothing but its count; the first dropped says so at once.
func (l *stderrLog) wanted() bool {
	if !l.log.Enabled(context.Background(), slog.LevelDebug) {
		return false
	}
	ok, dropped := l.take()
	if ok {
		return true
	}
	if dropped == 1 {
		l.log.Debug("server stderr lines dropped", "over_lines_per_second", stderrPerSecond)
	}
	return false
}

// line relays a (redacted) line, cut at stderrLineMax, after the count of
// the lines dropped before it.
func (l *stderrLog) line(s string) {
	if n := l.held(); n > 0 {
		l.log.Debug("server stderr lines dropped", "lines", n)
	}
	if len(s) > stderrLineMax {
		cut := stderrLineMax - len("…")
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	l.log.Debug("server stderr", "line", s)
}
