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

// janitor closes sessions idle for SessionTimeout and drops the servers of
// principals that have had no session for viewIdle.
func (a *Aggregator) janitor(ctx context.Context) {
	every := time.Minute
	if st := a.opts.SessionTimeout; st > 0 && st/4 < every {
		every = max(st/4, 10*time.Millisecond)
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
			a.sessions.closeIdle(views, time.Now().Add(-a.opts.SessionTimeout))
		}
		a.sweep(time.Now().Add(-viewIdle))
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
