package mcpserver

import (
	"context"
	"maps"
	"slices"
	"time"
)

// viewIdle is how long the MCP server of a principal without sessions is
// kept for its next request.
const viewIdle = 10 * time.Minute

// streamlessShare is the part of SessionTimeout after which an idle session
// that never opened the GET stream is closed (5 minutes of the default 30).
// Such sessions are what clients that exit without DELETE leave behind, and
// they pile up; a client that comes back after that gets 404 for the session
// and initializes a new one, as MCP asks of it. A session with a stream keeps
// the whole SessionTimeout.
const streamlessShare = 6

// janitor closes sessions idle for SessionTimeout (SessionTimeout /
// streamlessShare for those that never opened the GET stream) and drops the
// servers of principals that have had no session for viewIdle.
func (a *Aggregator) janitor(ctx context.Context) {
	every := time.Minute
	if st := a.opts.SessionTimeout; st > 0 && st/(4*streamlessShare) < every {
		every = max(st/(4*streamlessShare), 10*time.Millisecond)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if a.opts.SessionTimeout > 0 && !a.opts.Stateless {
			a.mu.Lock()
			views := slices.Collect(maps.Values(a.views))
			a.mu.Unlock()
			now := time.Now()
			a.sessions.closeIdle(views, now.Add(-a.opts.SessionTimeout), now.Add(-a.opts.SessionTimeout/streamlessShare))
		}
		a.sweep(time.Now().Add(-viewIdle))
		a.pushes.forget()
	}
}

// sweep drops the servers unused since cutoff that have no session.
func (a *Aggregator) sweep(cutoff time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for key, v := range a.views {
		if v.lastUsed.Load() > cutoff.UnixNano() {
			continue
		}
		busy := false
		for range v.server.Sessions() {
			busy = true
			break
		}
		if !busy {
			delete(a.views, key)
		}
	}
}
