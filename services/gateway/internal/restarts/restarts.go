// Package restarts keeps a crashed server's tools in the gateway while its
// runner restarts it.
//
// On a crash the runner writes the server's status: error with retry_at
// (the automatic restart, in the same write); then it deletes the server's
// catalog from KV mcp_tools; then starting, and finally the new catalog
// and running. Every status written in between (the call counters'
// refresh) keeps retry_at. The gateway follows the two buckets on watches
// of their own, so it may still see them in the other order. Without
// help, the gateway would drop the tools for the whole backoff and answer
// calls with "no such tool", and MCP clients would forget them. Catalogs
// keeps the last catalog of a server whose catalog went away and serves it
// while the status says a restart is coming (error with retry_at, or
// starting), so the tools stay listed and a call can be told to retry
// later. Any other status (stopped, idle, disabled, the status deleted) or a
// new catalog forgets it.
//
// Catalogs is not safe for concurrent use: its owner serialises the calls
// (Restarting only reads).
package restarts

import (
	"maps"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
)

// Catalogs merges the live catalogs of KV mcp_tools with the kept catalogs
// of servers being restarted.
type Catalogs struct {
	live   map[string]model.Catalog
	kept   map[string]model.Catalog
	status map[string]model.Status
}

// New returns an empty set.
func New() *Catalogs {
	return &Catalogs{live: map[string]model.Catalog{}, kept: map[string]model.Catalog{}, status: map[string]model.Status{}}
}

// restarting reports whether st says an automatic restart is under way.
func restarting(st model.Status, ok bool) bool {
	if !ok {
		return false
	}
	return st.State == model.StateStarting || (st.State == model.StateError && !st.RetryAt.IsZero())
}

// forgets reports whether st ends the wait for a restart: the server was
// stopped, disabled, left idle, or is gone. (An error without retry_at —
// restarts given up, or an older runner that wrote the bare error
// just before it scheduled the restart — keeps the catalog, unserved.)
func forgets(st model.Status, ok bool) bool {
	if !ok {
		return true
	}
	switch st.State {
	case model.StateStopped, model.StateDisabled, model.StateIdle:
		return true
	}
	return false
}

// SetLive installs a complete state of KV mcp_tools (the caller gives it
// up) and returns the catalogs to serve. A server whose catalog went away
// keeps it unless its status says the server is gone.
func (c *Catalogs) SetLive(live map[string]model.Catalog) map[string]model.Catalog {
	for slug, cat := range c.live {
		if _, still := live[slug]; !still {
			if st, ok := c.status[slug]; !forgets(st, ok) {
				c.kept[slug] = cat
			}
		}
	}
	for slug := range live {
		delete(c.kept, slug)
	}
	c.live = live
	return c.Serve()
}

// SetStatus installs a complete state of KV mcp_status and returns the
// catalogs to serve and whether they differ from before.
func (c *Catalogs) SetStatus(status map[string]model.Status) (map[string]model.Catalog, bool) {
	before := c.served()
	c.status = status
	for slug := range c.kept {
		if st, ok := status[slug]; forgets(st, ok) {
			delete(c.kept, slug)
		}
	}
	after := c.served()
	return c.Serve(), !maps.Equal(before, after)
}

// served is the set of kept catalogs served now.
func (c *Catalogs) served() map[string]bool {
	out := map[string]bool{}
	for slug := range c.kept {
		if st, ok := c.status[slug]; restarting(st, ok) {
			out[slug] = true
		}
	}
	return out
}

// Serve returns the catalogs to serve: the live ones and the kept ones of
// servers being restarted (a new map the caller may keep).
func (c *Catalogs) Serve() map[string]model.Catalog {
	out := maps.Clone(c.live)
	if out == nil {
		out = map[string]model.Catalog{}
	}
	for slug := range c.served() {
		out[slug] = c.kept[slug]
	}
	return out
}

// Restarting reports whether calls to server must wait for its restart,
// and how long: until retry_at for a server in error (at least a second),
// a second for one starting without a catalog yet. A server starting with
// its catalog in place (an idle server's first call, a manual restart) is
// not: the runner holds the call until it runs.
func (c *Catalogs) Restarting(server string, now time.Time) (time.Duration, bool) {
	st, ok := c.status[server]
	if !restarting(st, ok) {
		return 0, false
	}
	if st.State == model.StateError && st.Field == model.StatusFieldMaxServers {
		return 0, false // waiting for room: the runner tries a call's start at once
	}
	if st.State == model.StateStarting {
		if _, live := c.live[server]; live {
			return 0, false
		}
		return time.Second, true
	}
	d := st.RetryAt.Sub(now)
	if d < time.Second {
		d = time.Second
	}
	return d, true
}
