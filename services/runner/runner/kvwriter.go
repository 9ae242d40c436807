package runner

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/bus"
)

// latestWriter keeps a bucket's keys at the latest value written (status,
// tool catalogs). A write is tried at once within the caller's short bound,
// so a server's lifecycle goroutine is never held for long; a write that
// fails for a transient reason (a leader election, a reconnect) is handed to
// a background retry (bus.Retry within retryWindow). Writes of one key are
// kept in order: while a key has a write in the background, later writes of
// it queue there too, and only its latest value is written. keep tells
// whether a key is still this writer's to write (Runner.mayWrite), asked
// before every try: a stale background write must not overwrite a new
// owner's.
type latestWriter struct {
	kv     jetstream.KeyValue
	log    *slog.Logger
	window time.Duration
	keep   func(key string) bool

	mu      sync.Mutex
	pending map[string]pendingWrite // key → latest value not yet written
	busy    map[string]bool         // key → a write of it is under way
}

// pendingWrite is a value to put, or a delete.
type pendingWrite struct {
	data   []byte
	delete bool
}

// retryWindow bounds the background retry of one write: longer than a
// leader election (4–9 s with nats-server's timeouts).
const retryWindow = 30 * time.Second

func newLatestWriter(kv jetstream.KeyValue, keep func(string) bool, log *slog.Logger) *latestWriter {
	return &latestWriter{kv: kv, log: log, window: retryWindow, keep: keep,
		pending: map[string]pendingWrite{}, busy: map[string]bool{}}
}

// Put writes data at key within bound, else later in the background.
func (w *latestWriter) Put(key string, data []byte, bound time.Duration) {
	w.write(key, pendingWrite{data: data}, bound)
}

// Delete deletes key within bound, else later in the background.
func (w *latestWriter) Delete(key string, bound time.Duration) {
	w.write(key, pendingWrite{delete: true}, bound)
}

func (w *latestWriter) write(key string, p pendingWrite, bound time.Duration) {
	w.mu.Lock()
	if w.busy[key] {
		w.pending[key] = p
		w.mu.Unlock()
		return
	}
	w.busy[key] = true // no background retry may start for key meanwhile
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	err := w.apply(ctx, key, p)
	cancel()
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case err == nil:
	case bus.Transient(err):
		w.log.Warn("kv write unanswered; retrying in the background", "bucket", w.kv.Bucket(), "key", key, "error", err)
		if _, newer := w.pending[key]; !newer {
			w.pending[key] = p
		}
	default:
		w.log.Warn("kv write failed", "bucket", w.kv.Bucket(), "key", key, "error", err)
	}
	if _, ok := w.pending[key]; !ok {
		delete(w.busy, key)
		return
	}
	// A failed write, or one queued by another goroutine meanwhile.
	go w.drain(key)
}

// drain writes key's latest pending value until none is left.
func (w *latestWriter) drain(key string) {
	for {
		w.mu.Lock()
		p, ok := w.pending[key]
		delete(w.pending, key)
		if !ok {
			delete(w.busy, key)
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), w.window)
		err := bus.Retry(ctx, func(ctx context.Context, _ int) error {
			if !w.keep(key) { // another runner may have taken the key over during the backoff
				return errNotOurs
			}
			return w.apply(ctx, key, p)
		})
		cancel()
		switch {
		case errors.Is(err, errNotOurs):
			w.log.Warn("kv write dropped: the key is no longer this runner's to write", "bucket", w.kv.Bucket(), "key", key)
		case err != nil:
			w.log.Warn("kv write given up", "bucket", w.kv.Bucket(), "key", key, "error", err)
		}
	}
}

// errNotOurs ends the background retry of a key no longer this writer's.
var errNotOurs = errors.New("the key is no longer this runner's to write")

func (w *latestWriter) apply(ctx context.Context, key string, p pendingWrite) error {
	if p.delete {
		if err := w.kv.Delete(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return err
		}
		return nil
	}
	_, err := w.kv.Put(ctx, key, p.data)
	return err
}
