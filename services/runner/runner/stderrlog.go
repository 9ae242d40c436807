package runner

import (
	"context"
	"log/slog"
	"sync/atomic"
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

// stderrLog relays one server's stderr lines to the runner's debug log,
// across its restarts (a crash loop does not refill the burst).
type stderrLog struct {
	log     *slog.Logger
	lim     *rate.Limiter
	dropped atomic.Int64 // lines dropped since the last one relayed
}

func newStderrLog(log *slog.Logger) *stderrLog {
	return &stderrLog{log: log, lim: rate.NewLimiter(stderrPerSecond, stderrBurst)}
}

// wanted reports whether the next line is to be relayed: debug is on and
// the rate allows it. It is asked before the line is redacted, so a line
// dropped costs nothing but its count; the first dropped says so at once.
func (l *stderrLog) wanted() bool {
	if !l.log.Enabled(context.Background(), slog.LevelDebug) {
		return false
	}
	if l.lim.Allow() {
		return true
	}
	if l.dropped.Add(1) == 1 {
		l.log.Debug("server stderr lines dropped", "over_lines_per_second", stderrPerSecond)
	}
	return false
}

// line relays a (redacted) line, cut at stderrLineMax, after the count of
// the lines dropped before it.
func (l *stderrLog) line(s string) {
	if n := l.dropped.Swap(0); n > 0 {
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
