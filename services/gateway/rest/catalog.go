package rest

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/toolsearch"
	"github.com/mcpbus/mcpbus/services/gateway/internal/restarts"
)

// catalog is the gateway's copy of the tool catalog (KV mcp_tools, the same
// data runners answer mcp.v1.tools.list from). Holding it locally lets
// /mcp/invoke check a call's params against the tool's schema before sending
// anything on the bus, and /mcp/tools answer without a round trip.
//
// The status of every server (KV mcp_status) is followed too: a server the
// runner restarts after a crash keeps its tools (restarts.Catalogs), and a
// call to them is told when to retry.
type catalog struct {
	log *slog.Logger
	kv  jetstream.KeyValue // the bucket followed, read by fresh

	mu      sync.RWMutex
	servers map[string]model.Catalog // live, as in the bucket
	keep    *restarts.Catalogs
	status  map[string]model.Status
	byName  map[string]model.Tool
	// byServerName: tools by <server>__<tool> as their server names them,
	// where that is not their listed name (a dotted or long name) and names
	// one tool only.
	byServerName map[string]model.Tool
	// search ranks the same tools as byName; re-indexed per changed server.
	search *toolsearch.Index
}

func newCatalog(log *slog.Logger, kv jetstream.KeyValue) *catalog {
	return &catalog{log: log, kv: kv, servers: map[string]model.Catalog{}, keep: restarts.New(),
		status: map[string]model.Status{}, byName: map[string]model.Tool{}, search: toolsearch.New()}
}

// restarting reports whether calls to server must wait for its restart
// after a crash, and how long.
func (c *catalog) restarting(server string) (time.Duration, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.keep.Restarting(server, time.Now())
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

// tool finds a tool by its namespaced name, or by <server>__<tool> as its
// server names it.
func (c *catalog) tool(name string) (model.Tool, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if t, ok := c.byName[name]; ok {
		return t, true
	}
	t, ok := c.byServerName[name]
	return t, ok
}

// freshWait bounds fresh's read of the bucket.
const freshWait = 2 * time.Second

// fresh finds a tool the copy does not hold yet in the bucket itself. A
// server just enabled answers its start (POST …/enable waits for it) before
// this gateway's watch may have brought its catalog in: a call right after
// must not be told the tool does not exist. Only a well-formed
// <server>__<tool> name is looked up, one key read.
func (c *catalog) fresh(ctx context.Context, name string) (model.Tool, bool) {
	server, _, ok := strings.Cut(name, "__")
	if !ok || !model.ValidSlug(server) || c.kv == nil {
		return model.Tool{}, false
	}
	ctx, cancel := context.WithTimeout(ctx, freshWait)
	defer cancel()
	e, err := c.kv.Get(ctx, server)
	if err != nil {
		return model.Tool{}, false
	}
	if cat := c.decode(e); cat != nil {
		for _, t := range cat.Tools {
			if t.Server == "" {
				t.Server = server
			}
			if t.Name == name || t.Tool != "" && server+"__"+t.Tool == name {
				return t, true
			}
		}
	}
	return model.Tool{}, false
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

// setStatus installs the status of one server (nil: deleted).
func (c *catalog) setStatus(slug string, st *model.Status) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st == nil {
		delete(c.status, slug)
	} else {
		c.status[slug] = *st
	}
	c.applyStatus()
}

// replaceStatus installs a complete state of the status bucket.
func (c *catalog) replaceStatus(status map[string]model.Status) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.status = status
	c.applyStatus()
}

// applyStatus hands the status to keep; callers hold mu.
func (c *catalog) applyStatus() {
	if served, changed := c.keep.SetStatus(maps.Clone(c.status)); changed {
		c.index(served)
	}
}

// reindex rebuilds the name index from the live catalogs and the kept ones;
// callers hold mu.
func (c *catalog) reindex() { c.index(c.keep.SetLive(maps.Clone(c.servers))) }

// index rebuilds the name index of served and brings the search index in
// line (only servers whose catalog changed are re-indexed); callers hold mu.
func (c *catalog) index(served map[string]model.Catalog) {
	c.search.Sync(served)
	c.byName = map[string]model.Tool{}
	c.byServerName = map[string]model.Tool{}
	twice := map[string]bool{}
	for slug, cat := range served {
		for _, t := range cat.Tools {
			if t.Server == "" {
				t.Server = slug
			}
			if t.Name == "" || t.Tool == "" {
				continue
			}
			c.byName[t.Name] = t
			if own := t.Server + "__" + t.Tool; own != t.Name {
				_, seen := c.byServerName[own]
				twice[own] = twice[own] || seen
				c.byServerName[own] = t
			}
		}
	}
	for own := range c.byServerName {
		if _, listed := c.byName[own]; listed || twice[own] {
			delete(c.byServerName, own) // a listed name wins; two tools' name is neither's
		}
	}
}

// watch follows the bucket until ctx ends; bus.FollowKV starts over, with a
// complete state, after a NATS restart. ready is closed once the first
// complete state is in (or ctx ends).
func (c *catalog) watch(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue, ready chan<- struct{}) {
	readyOnce := sync.OnceFunc(func() { close(ready) })
	defer readyOnce()
	bus.FollowKV(ctx, nc, kv, bus.KVHandler{
		Snapshot: func(entries map[string]jetstream.KeyValueEntry) {
			servers := make(map[string]model.Catalog, len(entries))
			for slug, e := range entries {
				if cat := c.decode(e); cat != nil {
					servers[slug] = *cat
				}
			}
			c.replace(servers)
		},
		Update: func(e jetstream.KeyValueEntry) { c.set(e.Key(), c.decode(e)) },
		Ready:  readyOnce,
	}, bus.KVFollowOptions{Logger: c.log})
}

// watchStatus follows the status bucket until ctx ends, as watch does the
// catalog; ready is closed once the first complete state is in.
func (c *catalog) watchStatus(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue, ready chan<- struct{}) {
	readyOnce := sync.OnceFunc(func() { close(ready) })
	defer readyOnce()
	decode := func(e jetstream.KeyValueEntry) *model.Status {
		if e.Operation() != jetstream.KeyValuePut {
			return nil
		}
		var st model.Status
		if err := json.Unmarshal(e.Value(), &st); err != nil {
			c.log.Warn("ignoring an undecodable status", "server", e.Key(), "error", err)
			return nil
		}
		return &st
	}
	bus.FollowKV(ctx, nc, kv, bus.KVHandler{
		Snapshot: func(entries map[string]jetstream.KeyValueEntry) {
			status := make(map[string]model.Status, len(entries))
			for slug, e := range entries {
				if st := decode(e); st != nil {
					status[slug] = *st
				}
			}
			c.replaceStatus(status)
		},
		Update: func(e jetstream.KeyValueEntry) { c.setStatus(e.Key(), decode(e)) },
		Ready:  readyOnce,
	}, bus.KVFollowOptions{Logger: c.log})
}

// decode reads a watched entry: nil for a delete or an undecodable catalog.
func (c *catalog) decode(e jetstream.KeyValueEntry) *model.Catalog {
	if e.Operation() != jetstream.KeyValuePut {
		return nil
	}
	var cat model.Catalog
	if err := json.Unmarshal(e.Value(), &cat); err != nil {
		c.log.Warn("ignoring an undecodable catalog", "server", e.Key(), "error", err)
		return nil
	}
	return &cat
}
