package bus

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// KVHandler receives what FollowKV sees of a bucket; Snapshot and Update are
// required. FollowKV calls it from its own goroutine, one call at a time,
// never after FollowKV returned.
type KVHandler struct {
	// Snapshot receives the complete state of the bucket each time the watch
	// (re)starts: the latest entry of every key that holds a value (deleted
	// and purged keys are left out). The map is the callee's to keep.
	// Replacing the local state with it drops keys deleted while the watch
	// was down.
	Snapshot func(entries map[string]jetstream.KeyValueEntry)
	// Update receives each change after a snapshot: a put, a delete or a
	// purge (see the entry's Operation).
	Update func(e jetstream.KeyValueEntry)
	// Ready, if set, is called once, after the first Snapshot returned.
	Ready func()
	// Stale, if set, is called when the watch can no longer be trusted (the
	// connection reconnected, or the watch ended or failed), before it is
	// started again. The next Snapshot brings the state back.
	Stale func()
}

// KVFollowOptions tune FollowKV; the zero value is fine.
type KVFollowOptions struct {
	Logger *slog.Logger
	// CheckInterval is how often the connection's reconnect count is
	// checked (default 250ms): how late, at most, a reconnect is noticed.
	CheckInterval time.Duration
	// MaxBackoff bounds the wait between two attempts to watch (default 5s).
	// The wait starts at 100ms, doubles with every attempt that brings no
	// snapshot, and starts over after one that does.
	MaxBackoff time.Duration
	// LeaderInterval is how often the bucket's stream leader is read
	// (default 2s; see kvleader.go): how late, at most, a new leader is
	// noticed once it answers.
	LeaderInterval time.Duration
}

const (
	kvFollowCheck       = 250 * time.Millisecond
	kvFollowMinBackoff  = 100 * time.Millisecond
	kvFollowMaxBackoff  = 5 * time.Second
	kvFollowLeaderCheck = 2 * time.Second
	// kvDrainTimeout bounds the wait for an abandoned watcher to close.
	kvDrainTimeout = 30 * time.Second
)

// FollowKV keeps a consumer in step with every key of kv until ctx ends: a
// snapshot of the bucket, then each change. It exists because a plain KV
// watch (nats.go v1.55) does not survive a restart of the NATS server: the
// connection reconnects but the watch's ordered consumer is gone, and its
// updates stop until nats.go notices missing heartbeats (10 to 20 seconds
// later) — or for good, when recreating the consumer fails and the watch's
// channel just closes. FollowKV therefore starts the watch again, with a
// fresh snapshot, whenever nc's reconnect count changes, the watch's channel
// closes, watching fails, or the bucket's stream gets a new leader (its node
// died, and the watch's consumer perhaps with it, while nc stayed connected
// to another node: kvleader.go); attempts that fail are spaced by a bounded
// backoff. A nil nc disables the reconnect check.
func FollowKV(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue, h KVHandler, opts KVFollowOptions) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.CheckInterval <= 0 {
		opts.CheckInterval = kvFollowCheck
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = kvFollowMaxBackoff
	}
	if opts.LeaderInterval <= 0 {
		opts.LeaderInterval = kvFollowLeaderCheck
	}
	f := &kvFollower{nc: nc, kv: kv, h: h, opts: opts, log: opts.Logger.With("bucket", kv.Bucket())}
	backoff := kvFollowMinBackoff
	for ctx.Err() == nil {
		if f.follow(ctx) {
			backoff = kvFollowMinBackoff
		}
		if ctx.Err() != nil {
			return
		}
		if h.Stale != nil {
			h.Stale()
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		backoff = min(2*backoff, opts.MaxBackoff)
	}
}

type kvFollower struct {
	nc    *nats.Conn
	kv    jetstream.KeyValue
	h     KVHandler
	opts  KVFollowOptions
	log   *slog.Logger
	ready bool
}

func (f *kvFollower) reconnects() uint64 {
	if f.nc == nil {
		return 0
	}
	return f.nc.Stats().Reconnects
}

// follow runs one watch until it can no longer be trusted or ctx ends, and
// reports whether it delivered a snapshot.
func (f *kvFollower) follow(ctx context.Context) (snapshot bool) {
	epoch := f.reconnects()
	began := time.Now()
	// A watch's own context: nats.go unsubscribes the watch when it ends, and
	// holds a goroutine until then.
	wctx, cancel := context.WithCancel(ctx)
	w, err := f.kv.WatchAll(wctx)
	if err != nil {
		cancel()
		if ctx.Err() == nil {
			f.log.Warn("watching a bucket failed, retrying", "error", err)
		}
		return false
	}
	defer func() {
		cancel()
		// Stop also deletes the watch's consumer, a request that waits out
		// its timeout while the connection is down: do not wait for it. And
		// nats.go blocks delivering into a full channel: empty it until the
		// watch closes it, so that its goroutines end.
		go func() { _ = w.Stop() }()
		go drainWatcher(w)
	}()
	tick := time.NewTicker(f.opts.CheckInterval)
	defer tick.Stop()
	newLeader := make(chan string, 1)
	go f.watchLeader(wctx, began, newLeader)
	initial := map[string]jetstream.KeyValueEntry{} // nil once the snapshot is delivered
	for {
		select {
		case <-ctx.Done():
			return snapshot
		case <-tick.C:
			if f.reconnects() != epoch {
				f.log.Info("NATS reconnected: watching the bucket again")
				return snapshot
			}
		case leader := <-newLeader:
			f.log.Info("the bucket's stream has a new leader: watching it again", "leader", leader)
			return snapshot
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				if ctx.Err() == nil {
					f.log.Warn("the bucket's watch ended, watching it again")
				}
				return snapshot
			case initial == nil:
				if e != nil {
					f.h.Update(e)
				}
			case e != nil: // one of the initial values
				if e.Operation() == jetstream.KeyValuePut {
					initial[e.Key()] = e
				} else {
					delete(initial, e.Key())
				}
			default: // nil: the initial values are complete
				f.h.Snapshot(initial)
				initial, snapshot = nil, true
				if !f.ready {
					f.ready = true
					if f.h.Ready != nil {
						f.h.Ready()
					}
				}
				// A reconnect while the snapshot loaded leaves the watch
				// stale: notice it now rather than a tick later.
				if f.reconnects() != epoch {
					f.log.Info("NATS reconnected: watching the bucket again")
					return snapshot
				}
			}
		}
	}
}

// drainWatcher empties an abandoned watcher's channel until it closes, or
// gives up after kvDrainTimeout.
func drainWatcher(w jetstream.KeyWatcher) {
	t := time.NewTimer(kvDrainTimeout)
	defer t.Stop()
	for {
		select {
		case _, ok := <-w.Updates():
			if !ok {
				return
			}
		case <-t.C:
			return
		}
	}
}
