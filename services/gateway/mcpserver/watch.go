package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// The aggregate's view of the bus: KV mcp_tools (the catalogs) and
// mcp_status (which servers run), followed and kept in memory so that no
// list waits on a bus round trip.

// buckets opens KV mcp_tools and mcp_status, creating the shared assets when
// the gateway is the first service up.
func buckets(ctx context.Context, js jetstream.JetStream, prefix string) (tools, status jetstream.KeyValue, err error) {
	tools, err = bus.BindKV(ctx, js, bus.BucketTools)
	if err == nil {
		status, err = bus.BindKV(ctx, js, bus.BucketStatus)
	}
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		var assets *bus.Assets
		if assets, err = bus.EnsureAssets(ctx, js, bus.NewSubjects(prefix), bus.AssetOptions{}); err == nil {
			return assets.Tools, assets.Status, nil
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("mcpserver: opening the catalog buckets: %w", err)
	}
	return tools, status, nil
}

func decodeJSON[T any](data []byte) (T, error) {
	var v T
	err := json.Unmarshal(data, &v)
	return v, err
}

// watchKV follows every key of kv and calls apply with the full state (a
// copy the callee may keep) and the highest revision it holds after each
// snapshot and after each change.
// bus.FollowKV starts the watch over, with a complete state, after a NATS
// restart or when it breaks, so deletes missed meanwhile are not kept. ready
// is closed after the first complete state, or when ctx ends.
func watchKV[T any](ctx context.Context, log *slog.Logger, nc *nats.Conn, kv jetstream.KeyValue, decode func([]byte) (T, error), apply func(map[string]T, uint64), ready chan<- struct{}) {
	readyOnce := sync.OnceFunc(func() { close(ready) })
	defer readyOnce()
	state := map[string]T{} // only FollowKV's goroutine touches it
	set := func(e jetstream.KeyValueEntry) {
		if e.Operation() != jetstream.KeyValuePut {
			delete(state, e.Key())
			return
		}
		v, err := decode(e.Value())
		if err != nil {
			log.Warn("ignoring an undecodable entry", "bucket", kv.Bucket(), "key", e.Key(), "error", err)
			delete(state, e.Key())
			return
		}
		state[e.Key()] = v
	}
	bus.FollowKV(ctx, nc, kv, bus.KVHandler{
		Snapshot: func(entries map[string]jetstream.KeyValueEntry) {
			clear(state)
			var rev uint64
			for _, e := range entries {
				set(e)
				rev = max(rev, e.Revision())
			}
			apply(maps.Clone(state), rev)
		},
		Update: func(e jetstream.KeyValueEntry) {
			set(e)
			apply(maps.Clone(state), e.Revision())
		},
		Ready: readyOnce,
	}, bus.KVFollowOptions{Logger: log})
}

// applyCatalogs installs a new state of KV mcp_tools, with the kept catalogs
// of servers being restarted after a crash (restarts.Catalogs).
func (a *Aggregator) applyCatalogs(catalogs map[string]model.Catalog, rev uint64) {
	a.watchGate.RLock()
	defer a.watchGate.RUnlock()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.installCatalogs(a.restarts.SetLive(catalogs))
	a.caughtUp(rev)
}

// installCatalogs serves catalogs: the tool set is derived again and every
// principal's server gets the difference (go-sdk then tells its sessions
// tools/list_changed). a.mu is held.
func (a *Aggregator) installCatalogs(catalogs map[string]model.Catalog) {
	a.catalogs = catalogs
	warned := map[string]bool{}
	a.tools = deriveTools(catalogs, a.tools, func(t model.Tool, err error) {
		// Warn once per bad entry, not again at every catalog change.
		key := t.Server + "\x00" + t.Tool + "\x00" + err.Error()
		warned[key] = true
		if !a.warned[key] {
			a.log.Warn("catalog entry left out of the aggregate", "server", t.Server, "tool", t.Tool, "error", err)
		}
	})
	a.warned = warned
	a.indexTools()
	for _, v := range a.views {
		a.syncView(v)
	}
	a.trackRan(true)
}

// applyStatus installs a new state of KV mcp_status: lists ask only the
// running servers, so a list never starts every idle one; a server being
// restarted after a crash keeps its tools (restarts.Catalogs).
func (a *Aggregator) applyStatus(status map[string]model.Status, _ uint64) {
	running := make(map[string]bool, len(status))
	for slug, st := range status {
		running[slug] = st.State == model.StateRunning
	}
	a.renew.noteStatus(status) // subscriptions.go
	a.mu.Lock()
	defer a.mu.Unlock()
	a.running = running
	if catalogs, changed := a.restarts.SetStatus(status); changed {
		a.installCatalogs(catalogs)
		return
	}
	a.trackRan(false)
}

// restartWait is the error of a call to a tool whose server is being
// restarted after a crash (nil when it is not): retry after the restart.
func (a *Aggregator) restartWait(e *toolEntry) *apierr.Error {
	a.mu.Lock()
	wait, ok := a.restarts.Restarting(e.cat.Server, time.Now())
	a.mu.Unlock()
	if !ok {
		return nil
	}
	return apierr.Newf(apierr.ServiceUnavailable,
		"server %s is restarting after a crash; retry after %d s", e.cat.Server, model.RetryAfterSeconds(wait))
}

// restartResult answers a call during such a restart as a tool error, as
// an outage is (outageResult): the model reads when to retry, where a
// JSON-RPC error would read to many clients as a broken connection.
func (a *Aggregator) restartResult(e *toolEntry) *mcp.CallToolResult {
	if ae := a.restartWait(e); ae != nil {
		return toolError(ae.Message)
	}
	return nil
}

// restartError is restartWait as a JSON-RPC error, for a task's creation,
// which has no tool result to give.
func (a *Aggregator) restartError(e *toolEntry) *jsonrpc.Error {
	if ae := a.restartWait(e); ae != nil {
		return rpcError(jsonrpc.CodeInternalError, ae)
	}
	return nil
}
