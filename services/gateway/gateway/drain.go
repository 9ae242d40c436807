package gateway

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"
)

// A stopping instance lets its work in flight finish within the shutdown
// timeout. http.Server.Shutdown alone cannot tell work from an MCP stream
// that only ends with its session (a GET /mcp, a 2026-07-28
// subscriptions/listen): it would wait on the streams until the timeout,
// and ending the sessions earlier ends their calls. So the gateway counts
// the requests in flight other than those streams and ends the sessions
// once none is left (or late in the timeout). New work is refused by
// net/http itself: the listener is closed (a load balancer passes a refused
// connection to another instance, a POST included), and a request read from
// a connection made before is not served (the connection is closed).

// drainPoll is how often the shutdown looks at the count.
const drainPoll = 50 * time.Millisecond

// drainGrace is how long the sessions outlive the last call drained: its
// answer is written when the count drops, but a client reads it on one
// connection and its session's GET stream on another, and a stream that
// ends first fails the whole session, the answered call included (go-sdk).
const drainGrace = 250 * time.Millisecond

// drain counts the requests in flight.
type drain struct {
	inflight atomic.Int64
}

// middleware counts next's requests, not the MCP streams.
func (d *drain) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !mcpStream(r) {
			d.inflight.Add(1)
			defer d.inflight.Add(-1)
		}
		next.ServeHTTP(w, r)
	})
}

// mcpStream reports whether r opens an MCP stream that lasts as long as its
// session or subscription rather than a call.
func mcpStream(r *http.Request) bool {
	if r.URL.Path != "/mcp" {
		return false
	}
	return r.Method == http.MethodGet ||
		(r.Method == http.MethodPost && r.Header.Get("Mcp-Method") == "subscriptions/listen")
}

// wait returns once no counted request is in flight and busy reports
// nothing more held (after drainGrace if it had to wait), or when ctx ends.
func (d *drain) wait(ctx context.Context, busy func() bool) {
	t := time.NewTicker(drainPoll)
	defer t.Stop()
	waited := false
	for d.inflight.Load() > 0 || busy() {
		waited = true
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
	if waited {
		select {
		case <-time.After(drainGrace):
		case <-ctx.Done():
		}
	}
}
