// Package runnerwatch ends the calls of a runner that died.
//
// NATS cannot tell a caller that the runner its request reached is gone:
// the request just waits out its timeout (the gateway's is 60 s). Runners
// keep a heartbeat key (runner.<id>) and a lease per server replica
// (server.<slug>.<replica>, naming its runner) in KV mcp_owners, whose TTL
// (the lease TTL, 5 s by default) ends them when their runner stops
// renewing, with a marker that watchers see. Watch follows the bucket: a
// call of a server that one runner holds is tied to that runner, and ended
// with a SERVICE_UNAVAILABLE that wraps client.ErrRunnerGone once the
// runner's heartbeat goes. A server with several replicas shares its calls
// among them through a queue group, so which one took a call is unknown:
// its calls are not tied.
package runnerwatch

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
)

// The key prefixes of KV mcp_owners (services/runner/runner/ownership.go).
const (
	leasePrefix = "server."
	beatPrefix  = "runner."
)

// Retry is the retry hint of a call whose runner died: another runner takes
// the server over once the dead one's lease has expired, which it has by
// the time its heartbeat is seen gone.
const Retry = 5 * time.Second

// Watch knows which runner holds each server and which runners are alive.
type Watch struct {
	mu      sync.Mutex
	leases  map[string]lease              // lease key → what it says
	holders map[string]map[string]int     // server → runner → leases it holds
	alive   map[string]bool               // runners with a heartbeat key
	calls   map[string]map[*tied]struct{} // runner → calls tied to it
}

type lease struct{ server, runner string }

type tied struct {
	server string
	cancel context.CancelCauseFunc
}

// New returns an empty Watch: until Follow brings the bucket in, no call is
// tied.
func New() *Watch {
	return &Watch{leases: map[string]lease{}, holders: map[string]map[string]int{}, alive: map[string]bool{},
		calls: map[string]map[*tied]struct{}{}}
}

// Follow keeps w in step with kv (KV mcp_owners) until ctx ends.
func (w *Watch) Follow(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue, log *slog.Logger) {
	bus.FollowKV(ctx, nc, kv, bus.KVHandler{Snapshot: w.snapshot, Update: w.update}, bus.KVFollowOptions{Logger: log})
}

// Tie returns a context of ctx that ends with Gone's error when the one
// runner holding server dies; release frees it and must be called when the
// call is over. A server held by no runner or by several is not tied.
func (w *Watch) Tie(ctx context.Context, server string) (context.Context, context.CancelFunc) {
	w.mu.Lock()
	runner := w.onlyHolderLocked(server)
	if runner == "" {
		w.mu.Unlock()
		return ctx, func() {}
	}
	cctx, cancel := context.WithCancelCause(ctx)
	t := &tied{server: server, cancel: cancel}
	set := w.calls[runner]
	if set == nil {
		set = map[*tied]struct{}{}
		w.calls[runner] = set
	}
	set[t] = struct{}{}
	w.mu.Unlock()
	return cctx, func() {
		w.mu.Lock()
		delete(w.calls[runner], t)
		if len(w.calls[runner]) == 0 {
			delete(w.calls, runner)
		}
		w.mu.Unlock()
		cancel(context.Canceled)
	}
}

// Gone is the error of a call of server whose runner died during it.
func Gone(server, runner string) error {
	return apierr.Wrap(apierr.ServiceUnavailable, fmt.Sprintf(
		"the runner serving server %s stopped during the call (runner %s: its heartbeat expired), so the call may or may not have run; another runner takes the server over: retry after %d s",
		server, runner, model.RetryAfterSeconds(Retry)), client.ErrRunnerGone)
}

func (w *Watch) onlyHolderLocked(server string) string {
	h := w.holders[server]
	if len(h) != 1 {
		return ""
	}
	for runner := range h {
		if w.alive[runner] {
			return runner
		}
	}
	return ""
}

func (w *Watch) snapshot(entries map[string]jetstream.KeyValueEntry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	clear(w.leases)
	clear(w.holders)
	was := w.alive
	w.alive = map[string]bool{}
	for _, e := range entries {
		w.putLocked(e)
	}
	for runner := range was {
		if !w.alive[runner] {
			w.goneLocked(runner)
		}
	}
}

func (w *Watch) update(e jetstream.KeyValueEntry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e.Operation() == jetstream.KeyValuePut {
		w.putLocked(e)
		return
	}
	key := e.Key()
	if runner, ok := strings.CutPrefix(key, beatPrefix); ok {
		delete(w.alive, runner)
		w.goneLocked(runner)
		return
	}
	if l, ok := w.leases[key]; ok {
		delete(w.leases, key)
		w.dropLocked(l)
	}
}

// dropLocked forgets one lease of l.runner on l.server.
func (w *Watch) dropLocked(l lease) {
	if w.holders[l.server][l.runner]--; w.holders[l.server][l.runner] <= 0 {
		delete(w.holders[l.server], l.runner)
	}
	if len(w.holders[l.server]) == 0 {
		delete(w.holders, l.server)
	}
}

func (w *Watch) putLocked(e jetstream.KeyValueEntry) {
	key := e.Key()
	if runner, ok := strings.CutPrefix(key, beatPrefix); ok {
		w.alive[runner] = true
		return
	}
	if !strings.HasPrefix(key, leasePrefix) {
		return
	}
	var v struct {
		Runner string `json:"runner"`
		Server string `json:"server"`
	}
	if json.Unmarshal(e.Value(), &v) != nil || v.Runner == "" || v.Server == "" {
		return
	}
	if old, ok := w.leases[key]; ok {
		if old == (lease{v.Server, v.Runner}) {
			return // a renewal
		}
		w.dropLocked(old)
	}
	w.leases[key] = lease{v.Server, v.Runner}
	if w.holders[v.Server] == nil {
		w.holders[v.Server] = map[string]int{}
	}
	w.holders[v.Server][v.Runner]++
}

// goneLocked ends the calls tied to runner, which died.
func (w *Watch) goneLocked(runner string) {
	for t := range w.calls[runner] {
		t.cancel(Gone(t.server, runner))
	}
	delete(w.calls, runner)
}
