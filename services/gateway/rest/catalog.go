package rest

import (
	"context"
	"encoding/json"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/model"
)

// catalog is the gateway's copy of the tool catalog (KV mcp_tools, the same
// data runners answer mcp.v1.tools.list from). Holding it locally lets
// /mcp/invoke check a call's params against the tool's schema before sending
// anything on the bus, and /mcp/tools answer without a round trip.
type catalog struct {
	log *slog.Logger
	// reconnects is the connection's reconnect count: a KV watch does not
	// survive a restart of the NATS server (its updates just stop), so a
	// reconnect starts the watch again.
	reconnects func() uint64

	mu      sync.RWMutex
	servers map[string]model.Catalog
	byName  map[string]model.Tool
}

func newCatalog(log *slog.Logger, reconnects func() uint64) *catalog {
	return &catalog{log: log, reconnects: reconnects, servers: map[string]model.Catalog{}, byName: map[string]model.Tool{}}
}

// tools returns every tool, by name.
func (c *catalog) tools() []model.Tool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]model.Tool, 0, len(c.byName))
	for _, t := range c.byName {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// tool finds a tool by its namespaced name.
func (c *catalog) tool(name string) (model.Tool, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	t, ok := c.byName[name]
	return t, ok
}

// replace installs a complete state (after a watch (re)started).
func (c *catalog) replace(servers map[string]model.Catalog) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.servers = servers
	c.reindex()
}

func (c *catalog) set(slug string, cat *model.Catalog) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cat == nil {
		delete(c.servers, slug)
	} else {
		c.servers[slug] = *cat
	}
	c.reindex()
}

// reindex rebuilds the name index; callers hold mu.
func (c *catalog) reindex() {
	c.byName = map[string]model.Tool{}
	for slug, cat := range c.servers {
		for _, t := range cat.Tools {
			if t.Server == "" {
				t.Server = slug
			}
			if t.Name == "" || t.Tool == "" {
				continue
			}
			c.byName[t.Name] = t
		}
	}
}

// watch follows the bucket until ctx ends, starting the watch again when it
// breaks. ready is closed once the first complete state is in (or ctx ends).
func (c *catalog) watch(ctx context.Context, kv jetstream.KeyValue, ready chan<- struct{}) {
	readyOnce := sync.OnceFunc(func() { close(ready) })
	defer readyOnce()
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		epoch := c.reconnects()
		w, err := kv.WatchAll(ctx)
		if err != nil {
			c.log.Warn("watching the tool catalog failed, retrying", "error", err)
		} else {
			backoff = 100 * time.Millisecond
			c.follow(ctx, w, epoch, readyOnce)
			_ = w.Stop()
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (c *catalog) follow(ctx context.Context, w jetstream.KeyWatcher, epoch uint64, ready func()) {
	initial := map[string]model.Catalog{}
	loading := true
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if c.reconnects() != epoch {
				c.log.Info("NATS reconnected: watching the tool catalog again")
				return
			}
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil {
				loading = false
				c.replace(initial)
				ready()
				continue
			}
			var cat *model.Catalog
			if e.Operation() == jetstream.KeyValuePut {
				var v model.Catalog
				if err := json.Unmarshal(e.Value(), &v); err != nil {
					c.log.Warn("ignoring an undecodable catalog", "server", e.Key(), "error", err)
				} else {
					cat = &v
				}
			}
			if loading {
				if cat == nil {
					delete(initial, e.Key())
				} else {
					initial[e.Key()] = *cat
				}
				continue
			}
			c.set(e.Key(), cat)
		}
	}
}
