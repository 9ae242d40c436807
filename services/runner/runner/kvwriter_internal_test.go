package runner

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

// flakyKV is a bucket whose first fail writes go unanswered (as during a
// leader election); it records what was stored.
type flakyKV struct {
	jetstream.KeyValue
	mu     sync.Mutex
	fail   int
	tries  int
	stored map[string]string
}

func (f *flakyKV) Bucket() string { return "test" }

func (f *flakyKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tries++
	if f.fail > 0 {
		f.fail--
		return 0, jetstream.ErrNoStreamResponse
	}
	f.stored[key] = string(value)
	return uint64(f.tries), nil
}

func (f *flakyKV) Delete(ctx context.Context, key string, _ ...jetstream.KVDeleteOpt) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tries++
	if f.fail > 0 {
		f.fail--
		return jetstream.ErrNoStreamResponse
	}
	delete(f.stored, key)
	return nil
}

func (f *flakyKV) value(key string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.stored[key]
	return v, ok
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// TestLatestWriterRetriesInOrder: a write that goes unanswered is retried in
// the background; a later write of the same key, made meanwhile, is the one
// that stands (never overwritten by the older retry).
func TestLatestWriterRetriesInOrder(t *testing.T) {
	kv := &flakyKV{fail: 3, stored: map[string]string{}}
	w := newLatestWriter(kv, func(string) bool { return true }, quiet)
	w.Put("s", []byte("starting"), 50*time.Millisecond)
	if _, ok := kv.value("s"); ok {
		t.Fatal("the first try was meant to go unanswered")
	}
	w.Put("s", []byte("running"), 50*time.Millisecond) // queued behind the retry
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
		v, _ := kv.value("s")
		return v == "running", "stored " + v
	})
	time.Sleep(200 * time.Millisecond) // nothing older may land after it
	if v, _ := kv.value("s"); v != "running" {
		t.Fatalf("stored %q after the retries, want the latest value", v)
	}
	// A delete follows the same path.
	kv.mu.Lock()
	kv.fail = 1
	kv.mu.Unlock()
	w.Delete("s", 50*time.Millisecond)
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
		_, ok := kv.value("s")
		return !ok, "the key is still there"
	})
}

// TestLatestWriterDropsWhatIsNoLongerItsOwn: a background retry stops once
// the runner no longer holds the server, so a new owner's status stands.
func TestLatestWriterDropsWhatIsNoLongerItsOwn(t *testing.T) {
	kv := &flakyKV{fail: 1, stored: map[string]string{}}
	w := newLatestWriter(kv, func(string) bool { return false }, quiet)
	w.Put("s", []byte("stopping"), 50*time.Millisecond)
	time.Sleep(500 * time.Millisecond)
	kv.mu.Lock()
	tries := kv.tries
	kv.mu.Unlock()
	if tries != 1 {
		t.Fatalf("%d tries; want only the first one, the retry dropped", tries)
	}
	if _, ok := kv.value("s"); ok {
		t.Fatal("a dropped write was stored")
	}
}

// TestReleasedServerLastWritesLand: the writes that follow a server this
// runner let go (its catalog and status deleted, or its final status) are
// retried like any other while the server is no longer wanted and no other
// runner holds it. remove and releaseServer drop the lease before the
// server stops, and the retry only wrote keys whose lease the runner held:
// after one unanswered try, a deleted server's catalog stayed listed and its
// status said running. A server handed over, or taken by another runner
// meanwhile, is the new owner's to write.
func TestReleasedServerLastWritesLand(t *testing.T) {
	r := &Runner{opts: Options{ID: "me"}, leases: map[string]*lease{},
		desired: map[string]*model.McpConfig{"handed": {Slug: "handed"}},
		owners:  map[string]ownerEntry{"server.gone.0": {Runner: "me"}}}
	kv := &flakyKV{fail: 1, stored: map[string]string{"gone": "running", "handed": "running", "retaken": "running"}}
	w := newLatestWriter(kv, r.mayWrite, quiet)

	// Deleted: no longer wanted, the lease given back (still in the owners
	// cache until the watch sees the delete).
	w.Delete("gone", 50*time.Millisecond)
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
		v, ok := kv.value("gone")
		return !ok, "the deleted server's entry is still there: " + v
	})

	// Handed over: still wanted, so the new owner writes its status.
	kv.mu.Lock()
	kv.fail, kv.tries = 1, 0
	kv.mu.Unlock()
	w.Put("handed", []byte("stopped"), 50*time.Millisecond)
	// Deleted here, but another runner holds it already (enabled again).
	r.ownersMu.Lock()
	r.owners["server.retaken.0"] = ownerEntry{Runner: "other"}
	r.ownersMu.Unlock()
	kv.mu.Lock()
	kv.fail = 1 << 30
	kv.mu.Unlock()
	w.Delete("retaken", 50*time.Millisecond)
	time.Sleep(500 * time.Millisecond)
	kv.mu.Lock()
	tries := kv.tries
	kv.mu.Unlock()
	if tries != 2 {
		t.Fatalf("%d tries; want only the first of each write, their retries dropped", tries)
	}
	if v, _ := kv.value("handed"); v != "running" {
		t.Fatalf("the handed over server's status is %q: a stale retry overwrote its new owner's", v)
	}
	if _, ok := kv.value("retaken"); !ok {
		t.Fatal("a stale retry deleted the entry of a server another runner holds")
	}
}
