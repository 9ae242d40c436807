package bus_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/testkit"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/embednats"
)

// follower records what FollowKV hands over and keeps the state a consumer
// would (snapshot, then updates).
type follower struct {
	mu        sync.Mutex
	snapshots []map[string]string
	updates   []string // "put k=v", "del k"
	state     map[string]string
	stale     int
	ready     chan struct{}
}

func newFollower() *follower { return &follower{ready: make(chan struct{})} }

func (f *follower) handler() bus.KVHandler {
	return bus.KVHandler{
		Snapshot: func(entries map[string]jetstream.KeyValueEntry) {
			snap := map[string]string{}
			for k, e := range entries {
				if e.Key() != k || e.Operation() != jetstream.KeyValuePut {
					panic(fmt.Sprintf("snapshot entry %q holds %q (%v)", k, e.Key(), e.Operation()))
				}
				snap[k] = string(e.Value())
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			f.snapshots = append(f.snapshots, snap)
			f.state = maps.Clone(snap)
		},
		Update: func(e jetstream.KeyValueEntry) {
			f.mu.Lock()
			defer f.mu.Unlock()
			if e.Operation() == jetstream.KeyValuePut {
				f.updates = append(f.updates, "put "+e.Key()+"="+string(e.Value()))
				f.state[e.Key()] = string(e.Value())
			} else {
				f.updates = append(f.updates, "del "+e.Key())
				delete(f.state, e.Key())
			}
		},
		Ready: func() { close(f.ready) }, // a second call would panic
		Stale: func() { f.mu.Lock(); f.stale++; f.mu.Unlock() },
	}
}

func (f *follower) snapshotCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.snapshots)
}

func (f *follower) lastSnapshot() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.snapshots[len(f.snapshots)-1]
}

func (f *follower) hasUpdate(u string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Contains(f.updates, u)
}

func (f *follower) staleCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stale
}

func (f *follower) stateIs(want map[string]string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Equal(f.state, want)
}

func waitUntil(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// runFollow runs FollowKV until the test ends and checks that it returns
// promptly once its context ends.
func runFollow(t *testing.T, nc *nats.Conn, kv jetstream.KeyValue, f *follower, opts bus.KVFollowOptions) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		bus.FollowKV(ctx, nc, kv, f.handler(), opts)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("FollowKV did not return within 5s of its context ending")
		}
	})
}

// gate is a dialer that refuses to connect while closed: it holds a client's
// reconnect back until the test lets it through.
type gate struct{ closed atomic.Bool }

func (g *gate) Dial(network, address string) (net.Conn, error) {
	if g.closed.Load() {
		return nil, errors.New("gate closed")
	}
	return (&net.Dialer{Timeout: 2 * time.Second}).Dial(network, address)
}

func withTimeout(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// retry repeats op until it succeeds: right after a restart JetStream may
// need a moment before it answers.
func retry(t *testing.T, what string, op func() error) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := op()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// After the NATS server restarts (same store, same port), a plain KV watch
// of the reconnected connection stays silent, while FollowKV starts over:
// a key deleted while the watch was down is gone from its new snapshot, and
// later changes arrive as updates.
func TestFollowKVAcrossServerRestart(t *testing.T) {
	srv, err := embednats.Start(embednats.Options{Port: -1, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			srv.Stop()
		}
	})
	g := &gate{}
	nc, err := srv.ConnectTCP(nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.SetCustomDialer(g))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(withTimeout(t), jetstream.KeyValueConfig{Bucket: "follow", Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "gone"} {
		if _, err := kv.PutString(withTimeout(t), k, k+"1"); err != nil {
			t.Fatal(err)
		}
	}
	if err := kv.Delete(withTimeout(t), "gone"); err != nil {
		t.Fatal(err)
	}

	// The plain watch, for comparison: it records every key it is told of.
	plain, err := kv.WatchAll(withTimeout(t))
	if err != nil {
		t.Fatal(err)
	}
	plainStart := time.Now() // closing nc stops it
	var plainMu sync.Mutex
	var plainSeen []string
	go func() {
		for e := range plain.Updates() {
			if e != nil {
				plainMu.Lock()
				plainSeen = append(plainSeen, fmt.Sprintf("%v %s", e.Operation(), e.Key()))
				plainMu.Unlock()
			}
		}
	}()
	plainSaw := func(s string) bool {
		plainMu.Lock()
		defer plainMu.Unlock()
		return slices.Contains(plainSeen, s)
	}

	f := newFollower()
	runFollow(t, nc, kv, f, bus.KVFollowOptions{})
	select {
	case <-f.ready:
	case <-time.After(10 * time.Second):
		t.Fatal("no first snapshot within 10s")
	}
	if got, want := f.lastSnapshot(), map[string]string{"a": "a1", "b": "b1"}; !maps.Equal(got, want) {
		t.Fatalf("first snapshot = %v, want %v (the deleted key left out)", got, want)
	}
	if _, err := kv.PutString(withTimeout(t), "c", "c1"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the update of c", 5*time.Second, func() bool { return f.hasUpdate("put c=c1") })
	waitUntil(t, "the plain watch to see c", 5*time.Second, func() bool { return plainSaw("KeyValuePutOp c") })

	// Restart the server; hold the watched connection back until another
	// client has deleted b and put d on the restarted server.
	g.closed.Store(true)
	srv.Stop()
	stopped = true
	srv2, err := embednats.Start(srv.Options())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv2.Stop)
	other, err := srv2.ConnectTCP()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	ojs, err := jetstream.New(other)
	if err != nil {
		t.Fatal(err)
	}
	var okv jetstream.KeyValue
	retry(t, "opening the bucket after the restart", func() (err error) {
		okv, err = ojs.KeyValue(withTimeout(t), "follow")
		return err
	})
	retry(t, "deleting b", func() error { return okv.Delete(withTimeout(t), "b") })
	retry(t, "putting d", func() error { _, err := okv.PutString(withTimeout(t), "d", "d1"); return err })
	if n := nc.Stats().Reconnects; n != 0 {
		t.Fatalf("the watched connection reconnected through a closed gate (%d)", n)
	}
	g.closed.Store(false)

	waitUntil(t, "a snapshot after the restart", 10*time.Second, func() bool { return f.snapshotCount() >= 2 })
	if got, want := f.lastSnapshot(), map[string]string{"a": "a1", "c": "c1", "d": "d1"}; !maps.Equal(got, want) {
		t.Fatalf("snapshot after the restart = %v, want %v", got, want)
	}
	if f.hasUpdate("del b") {
		t.Fatal("b's deletion came as an update: the watch restarted before it, so the test proves nothing")
	}
	if f.staleCount() == 0 {
		t.Fatal("Stale was not called before the watch restarted")
	}
	retry(t, "putting e", func() error { _, err := okv.PutString(withTimeout(t), "e", "e1"); return err })
	waitUntil(t, "the update of e after the restart", 5*time.Second, func() bool { return f.hasUpdate("put e=e1") })
	if want := map[string]string{"a": "a1", "c": "c1", "d": "d1", "e": "e1"}; !f.stateIs(want) {
		t.Fatalf("followed state = %v, want %v", f.state, want)
	}

	// The plain watch on the same, reconnected connection missed all of it.
	// nats.go recreates its consumer only once its heartbeat check (every
	// 10s, after a window with activity) finds it idle: 20s after the watch
	// started at the earliest. A machine too slow to get here well before
	// that cannot show it.
	time.Sleep(time.Second)
	if elapsed := time.Since(plainStart); elapsed > 15*time.Second {
		t.Logf("the plain-watch comparison is skipped: %v since it started", elapsed)
		return
	}
	for _, s := range []string{"KeyValueDeleteOp b", "KeyValuePutOp d", "KeyValuePutOp e"} {
		if plainSaw(s) {
			t.Errorf("the plain watch saw %q: nats.go now resumes a KV watch after a server restart, "+
				"so FollowKV's restart on reconnect may be unneeded", s)
		}
	}
}

// capturingKV is the real bucket, with a handle on each watch FollowKV
// starts and a way to hold back the next one.
type capturingKV struct {
	jetstream.KeyValue
	mu       sync.Mutex
	watchers []jetstream.KeyWatcher
	attempts []time.Time
	hold     chan struct{} // non-nil: WatchAll waits for it to close
}

func (c *capturingKV) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	c.mu.Lock()
	hold := c.hold
	c.attempts = append(c.attempts, time.Now())
	c.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	w, err := c.KeyValue.WatchAll(ctx, opts...)
	if err == nil {
		c.mu.Lock()
		c.watchers = append(c.watchers, w)
		c.mu.Unlock()
	}
	return w, err
}

func (c *capturingKV) attemptTimes() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.attempts)
}

// A watch whose channel closes (here: stopped under FollowKV's feet) is
// started again, and its snapshot drops what was deleted meanwhile.
func TestFollowKVRestartsAClosedWatch(t *testing.T) {
	srv, err := embednats.Start(embednats.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	nc := testkit.Connect(t, srv)
	js, _ := jetstream.New(nc)
	bucket, err := js.CreateKeyValue(withTimeout(t), jetstream.KeyValueConfig{Bucket: "closing"})
	if err != nil {
		t.Fatal(err)
	}
	kv := &capturingKV{KeyValue: bucket}
	for _, k := range []string{"a", "b"} {
		if _, err := kv.PutString(withTimeout(t), k, k+"1"); err != nil {
			t.Fatal(err)
		}
	}
	f := newFollower()
	runFollow(t, nc, kv, f, bus.KVFollowOptions{})
	select {
	case <-f.ready:
	case <-time.After(10 * time.Second):
		t.Fatal("no first snapshot within 10s")
	}

	hold := make(chan struct{})
	kv.mu.Lock()
	kv.hold = hold
	first := kv.watchers[0]
	kv.mu.Unlock()
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "FollowKV to notice the closed watch", 5*time.Second, func() bool { return f.staleCount() == 1 })
	if err := kv.Delete(withTimeout(t), "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.PutString(withTimeout(t), "c", "c1"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "FollowKV to try watching again", 5*time.Second, func() bool { return len(kv.attemptTimes()) == 2 })
	close(hold)

	waitUntil(t, "a second snapshot", 5*time.Second, func() bool { return f.snapshotCount() == 2 })
	if got, want := f.lastSnapshot(), map[string]string{"a": "a1", "c": "c1"}; !maps.Equal(got, want) {
		t.Fatalf("second snapshot = %v, want %v", got, want)
	}
	if f.hasUpdate("del b") || f.hasUpdate("put c=c1") {
		t.Fatalf("changes made while the watch was down came as updates: %v", f.updates)
	}
	if err := kv.Delete(withTimeout(t), "a"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the delete of a as an update", 5*time.Second, func() bool { return f.hasUpdate("del a") })
	if want := map[string]string{"c": "c1"}; !f.stateIs(want) {
		t.Fatalf("followed state = %v, want %v", f.state, want)
	}
}

// While the bucket cannot be watched FollowKV keeps trying, ever more
// slowly but never slower than MaxBackoff, and is not ready; once the
// bucket is back the first snapshot comes and Ready is called.
func TestFollowKVRetriesUntilTheBucketExists(t *testing.T) {
	srv, err := embednats.Start(embednats.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	nc := testkit.Connect(t, srv)
	js, _ := jetstream.New(nc)
	cfg := jetstream.KeyValueConfig{Bucket: "later"}
	bucket, err := js.CreateKeyValue(withTimeout(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(withTimeout(t), cfg.Bucket); err != nil {
		t.Fatal(err)
	}
	kv := &capturingKV{KeyValue: bucket}
	f := newFollower()
	const maxBackoff = 300 * time.Millisecond
	runFollow(t, nc, kv, f, bus.KVFollowOptions{MaxBackoff: maxBackoff})

	// Unbounded doubling from 100ms would wait 3.2s before the 7th attempt.
	waitUntil(t, "7 attempts to watch", 10*time.Second, func() bool { return len(kv.attemptTimes()) >= 7 })
	at := kv.attemptTimes()
	if gap := at[6].Sub(at[5]); gap > maxBackoff+time.Second {
		t.Fatalf("%v between attempts 6 and 7: the backoff is not bounded by %v", gap, maxBackoff)
	}
	if gap := at[1].Sub(at[0]); gap < 80*time.Millisecond {
		t.Fatalf("%v between the first two attempts: no backoff", gap)
	}
	select {
	case <-f.ready:
		t.Fatal("ready without a bucket")
	default:
	}
	if f.snapshotCount() != 0 {
		t.Fatal("a snapshot without a bucket")
	}

	if _, err := js.CreateKeyValue(withTimeout(t), cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.PutString(withTimeout(t), "x", "x1"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.ready:
	case <-time.After(5 * time.Second):
		t.Fatal("not ready within 5s of the bucket's return")
	}
	// x comes in the snapshot or, when the watch began before the put, as an update.
	waitUntil(t, "x to be followed", 5*time.Second, func() bool { return f.stateIs(map[string]string{"x": "x1"}) })
}
