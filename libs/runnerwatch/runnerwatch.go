// Package runnerwatch ends the calls of a runner that died.
//
// NATS cannot tell a caller that the runner its request reached is gone:
// the request just waits out its timeout (the gateway's is 60 s, the chat
// service's 30 s); the gateway and the chat service tie their calls here.
// A runner holds a lease per server replica (server.<slug>.<replica>, naming the
// runner and when it took it) in KV mcp_owners, renewed every third of the
// lease TTL by a loop of its own; the bucket's TTL (5 s by default) ends
// the lease of a runner that stopped renewing, with a marker that watchers
// see. Watch follows the bucket: a call of a server that one lease holds is
// tied to that lease, and ended with a SERVICE_UNAVAILABLE that wraps
// client.ErrRunnerGone once the lease ends or another takes it (a runner
// that restarted under the same id takes it anew). A runner giving a server
// up deletes its lease only after its calls were answered. A server with
// several replicas shares its calls among them through a queue group, so
// which one took a call is unknown: its calls are not tied.
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

// Retry is the retry hint of a call whose runner died: another runner takes
// the server over once the dead one's lease has expired, which it has by
// the time the call is ended.
const Retry = 5 * time.Second

// Watch knows which lease holds each server.
type Watch struct {
	mu      sync.Mutex
	leases  map[string]lease              // lease key → what it says
	holders map[string]map[string]bool    // server → its lease keys
	calls   map[string]map[*tied]struct{} // lease key → calls tied to it
}

// lease is what a lease key says: who holds it since when (a runner that
// takes it anew, even under the same id, writes a new since, in ns).
type lease struct {
	server, runner string
	since          int64
}

type tied struct {
	server string
	cancel context.CancelCauseFunc
}

// New returns an empty Watch: until Follow brings the bucket in, no call is
// tied.
func New() *Watch {
	return &Watch{leases: map[string]lease{}, holders: map[string]map[string]bool{}, calls: map[string]map[*tied]struct{}{}}
}

// Follow keeps w in step with kv (KV mcp_owners) until ctx ends.
func (w *Watch) Follow(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue, log *slog.Logger) {
	bus.FollowKV(ctx, nc, kv, bus.KVHandler{Snapshot: w.snapshot, Update: w.update}, bus.KVFollowOptions{Logger: log})
}

// FollowWhenThere is Follow for a service that does not create KV
// mcp_owners (the runners and the gateway do; the chat service does not):
// it binds the bucket once it exists, asking again every bindRetry, then
// follows it until ctx ends. Until then no call is tied.
func (w *Watch) FollowWhenThere(ctx context.Context, nc *nats.Conn, log *slog.Logger) {
	js, err := jetstream.New(nc)
	if err != nil {
		log.Warn("runner leases: no JetStream context; calls are not tied to their runner", "error", err)
		return
	}
	for {
		bctx, cancel := context.WithTimeout(ctx, bindTimeout)
		kv, err := bus.BindKV(bctx, js, bus.BucketOwners)
		cancel()
		if err == nil {
			w.Follow(ctx, nc, kv, log)
			return
		}
		log.Debug("runner leases: the bucket is not there yet", "bucket", bus.BucketOwners, "error", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(bindRetry):
		}
	}
}

// bindRetry is how long FollowWhenThere waits between two binds of the
// bucket: short, as a call made meanwhile is not tied (a chat service
// started beside the runners, as the split deployment starts them, sent a
// turn's call within the 2 s it waited before: a runner killed then left
// the call to its 30 s timeout). bindTimeout bounds one bind.
const (
	bindRetry   = 250 * time.Millisecond
	bindTimeout = 2 * time.Second
)

// Tie returns a context of ctx that ends with Gone's error when the one
// lease holding server ends or changes hands; release frees it and must be
// called when the call is over. A server held by no lease or by several is
// not tied. It is a client.TieFunc (the tool and request id do not matter
// here).
func (w *Watch) Tie(ctx context.Context, server, _, _ string) (context.Context, context.CancelFunc) {
	w.mu.Lock()
	key := w.onlyLeaseLocked(server)
	if key == "" {
		w.mu.Unlock()
		return ctx, func() {}
	}
	cctx, cancel := context.WithCancelCause(ctx)
	t := &tied{server: server, cancel: cancel}
	set := w.calls[key]
	if set == nil {
		set = map[*tied]struct{}{}
		w.calls[key] = set
	}
	set[t] = struct{}{}
	w.mu.Unlock()
	return cctx, func() {
		w.mu.Lock()
		delete(w.calls[key], t)
		if len(w.calls[key]) == 0 {
			delete(w.calls, key)
		}
		w.mu.Unlock()
		cancel(context.Canceled)
	}
}

// Gone is the error of a call of server whose runner lost it during the call.
func Gone(server, runner string) error {
	return apierr.Wrap(apierr.ServiceUnavailable, fmt.Sprintf(
		"the runner serving server %s stopped serving it during the call (runner %s: its lease expired or was taken over), so the call may or may not have run; another runner takes the server over: retry after %d s",
		server, runner, model.RetryAfterSeconds(Retry)), client.ErrRunnerGone)
}

func (w *Watch) onlyLeaseLocked(server string) string {
	if keys := w.holders[server]; len(keys) == 1 {
		for key := range keys {
			return key
		}
	}
	return ""
}

func (w *Watch) snapshot(entries map[string]jetstream.KeyValueEntry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	was := w.leases
	w.leases = map[string]lease{}
	clear(w.holders)
	for key, e := range entries {
		if l, ok := decode(key, e); ok {
			w.setLocked(key, l)
		}
	}
	for key := range w.calls {
		if now, ok := w.leases[key]; !ok || now != was[key] {
			w.endLocked(key, was[key])
		}
	}
}

func (w *Watch) update(e jetstream.KeyValueEntry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	key := e.Key()
	old, had := w.leases[key]
	l, ok := decode(key, e)
	if ok && had && l == old {
		return // a renewal
	}
	if had {
		w.endLocked(key, old)
		delete(w.leases, key)
		delete(w.holders[old.server], key)
		if len(w.holders[old.server]) == 0 {
			delete(w.holders, old.server)
		}
	}
	if ok {
		w.setLocked(key, l)
	}
}

// decode reads a lease entry; ok is false for a delete, a heartbeat or a
// value that is not a lease.
func decode(key string, e jetstream.KeyValueEntry) (lease, bool) {
	if e.Operation() != jetstream.KeyValuePut || !strings.HasPrefix(key, model.LeaseKeyPrefix) {
		return lease{}, false
	}
	var v model.Lease
	if json.Unmarshal(e.Value(), &v) != nil || v.Runner == "" || v.Server == "" {
		return lease{}, false
	}
	return lease{server: v.Server, runner: v.Runner, since: v.Since.UnixNano()}, true
}

func (w *Watch) setLocked(key string, l lease) {
	w.leases[key] = l
	if w.holders[l.server] == nil {
		w.holders[l.server] = map[string]bool{}
	}
	w.holders[l.server][key] = true
}

// endLocked ends the calls tied to the lease key, which old held and no
// longer does.
func (w *Watch) endLocked(key string, old lease) {
	for t := range w.calls[key] {
		t.cancel(Gone(t.server, old.runner))
	}
	delete(w.calls, key)
}
