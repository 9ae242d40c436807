package runner

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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
