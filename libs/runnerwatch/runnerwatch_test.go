package runnerwatch_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/runnerwatch"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

// owners starts an embedded server and returns KV mcp_owners as the runners
// make it, with a lease TTL of ttl, and a Watch following it.
func owners(t *testing.T, ttl time.Duration) (jetstream.KeyValue, *runnerwatch.Watch) {
	t.Helper()
	nc := testkit.Connect(t, testkit.NATS(t))
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	assets, err := bus.EnsureAssets(ctx, js, bus.NewSubjects(""), bus.AssetOptions{LeaseTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	w := runnerwatch.New()
	fctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Follow(fctx, nc, assets.Owners, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	t.Cleanup(func() { stop(); <-done })
	return assets.Owners, w
}

func put(t *testing.T, kv jetstream.KeyValue, key, value string) {
	t.Helper()
	if _, err := kv.Put(t.Context(), key, []byte(value)); err != nil {
		t.Fatal(err)
	}
}

// tieWhenFollowed ties a call of server once the watch has seen its lease.
func tieWhenFollowed(t *testing.T, w *runnerwatch.Watch, server string) (context.Context, context.CancelFunc) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ctx, release := w.Tie(t.Context(), server, "", "")
		if ctx != t.Context() {
			return ctx, release
		}
		release()
		if time.Now().After(deadline) {
			t.Fatalf("a call of %s was never tied", server)
		}
	}
}

func endedBy(t *testing.T, ctx context.Context, within time.Duration, server string) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(within):
		t.Fatalf("the call of %s did not end within %s of its lease's end", server, within)
	}
	cause := context.Cause(ctx)
	if !errors.Is(cause, client.ErrRunnerGone) || apierr.Of(cause) != apierr.ServiceUnavailable ||
		!strings.Contains(cause.Error(), "server "+server+" stopped serving it during the call") || !strings.Contains(cause.Error(), "may or may not have run") {
		t.Fatalf("cause = %v, want SERVICE_UNAVAILABLE wrapping ErrRunnerGone naming %s", cause, server)
	}
}

// A lease that ends (deleted, purged) or changes hands (a takeover, or a
// runner taking it anew under the same id) ends the calls tied to it, and
// only those; a renewal does not.
func TestLeaseEndEndsItsCalls(t *testing.T) {
	kv, w := owners(t, time.Minute)
	put(t, kv, "runner.r1", `{"runner":"r1"}`) // heartbeats play no part
	put(t, kv, "server.multi.0", `{"runner":"r1","server":"multi","replica":0,"since":"2026-11-28T00:00:01Z"}`)
	put(t, kv, "server.multi.1", `{"runner":"r2","server":"multi","replica":1,"since":"2026-11-28T00:00:01Z"}`)
	put(t, kv, "server.alpha.0", `{"runner":"r1","server":"alpha","replica":0,"since":"2026-11-28T00:00:01Z"}`)
	put(t, kv, "server.beta.0", `{"runner":"r2","server":"beta","replica":0,"since":"2026-11-28T00:00:01Z"}`) // seen last: the watch keeps the bucket's order

	alpha, releaseAlpha := tieWhenFollowed(t, w, "alpha")
	defer releaseAlpha()
	beta, releaseBeta := tieWhenFollowed(t, w, "beta")
	defer releaseBeta()
	// Several replicas: which one took the call is unknown, so it is not tied.
	if multi, release := w.Tie(t.Context(), "multi", "", ""); multi != t.Context() {
		release()
		t.Fatal("a call of a server with two leases was tied")
	}
	if none, release := w.Tie(t.Context(), "nobody-holds-it", "", ""); none != t.Context() {
		release()
		t.Fatal("a call of a server nobody holds was tied")
	}
	// A released call is no longer ended by its lease's end.
	released, release := tieWhenFollowed(t, w, "alpha")
	release()
	// A renewal (the same value again) and a heartbeat's end change nothing.
	put(t, kv, "server.alpha.0", `{"runner":"r1","server":"alpha","replica":0,"since":"2026-11-28T00:00:01Z"}`)
	if err := kv.Delete(t.Context(), "runner.r1"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if alpha.Err() != nil {
		t.Fatalf("a renewal ended the call: %v", context.Cause(alpha))
	}

	if err := kv.Delete(t.Context(), "server.alpha.0"); err != nil {
		t.Fatal(err)
	}
	endedBy(t, alpha, 5*time.Second, "alpha")
	if !errors.Is(context.Cause(released), context.Canceled) {
		t.Fatalf("a released call ended with %v", context.Cause(released))
	}
	time.Sleep(100 * time.Millisecond)
	if beta.Err() != nil {
		t.Fatalf("another server's call ended: %v", context.Cause(beta))
	}
	// r2 takes alpha: new calls are tied to its lease.
	put(t, kv, "server.alpha.0", `{"runner":"r2","server":"alpha","replica":0,"since":"2026-11-28T00:00:02Z"}`)
	moved, releaseMoved := tieWhenFollowed(t, w, "alpha")
	defer releaseMoved()
	// r2 restarts under the same id and takes its leases anew.
	put(t, kv, "server.alpha.0", `{"runner":"r2","server":"alpha","replica":0,"since":"2026-11-28T00:00:03Z"}`)
	endedBy(t, moved, 5*time.Second, "alpha")
	// A takeover of beta by r3.
	put(t, kv, "server.beta.0", `{"runner":"r3","server":"beta","replica":0,"since":"2026-11-28T00:00:02Z"}`)
	endedBy(t, beta, 5*time.Second, "beta")
	again, releaseAgain := tieWhenFollowed(t, w, "beta")
	defer releaseAgain()
	if err := kv.Purge(t.Context(), "server.beta.0"); err != nil {
		t.Fatal(err)
	}
	endedBy(t, again, 5*time.Second, "beta")
}

// A runner that stops renewing (killed) loses its lease to the bucket's
// TTL: the marker the server writes then ends its calls within about a
// lease's time.
func TestLeaseExpiryEndsItsCalls(t *testing.T) {
	kv, w := owners(t, time.Second)
	put(t, kv, "server.alpha.0", `{"runner":"r1","server":"alpha","replica":0,"since":"2026-11-28T00:00:01Z"}`)
	start := time.Now()
	call, release := tieWhenFollowed(t, w, "alpha")
	defer release()
	endedBy(t, call, 10*time.Second, "alpha")
	if took := time.Since(start); took < 900*time.Millisecond {
		t.Fatalf("the call ended after %s, before the lease's TTL of 1s", took)
	}
}

// A service that does not create the bucket (the chat service) follows it
// once it is there: calls are untied until then, and tied after.
func TestFollowWhenThereWaitsForTheBucket(t *testing.T) {
	nc := testkit.Connect(t, testkit.NATS(t))
	w := runnerwatch.New()
	fctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.FollowWhenThere(fctx, nc, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	t.Cleanup(func() { stop(); <-done })
	time.Sleep(300 * time.Millisecond) // its first bind found no bucket
	if ctx, release := w.Tie(t.Context(), "alpha", "", ""); ctx != t.Context() {
		release()
		t.Fatal("a call was tied before the bucket existed")
	}
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	assets, err := bus.EnsureAssets(ctx, js, bus.NewSubjects(""), bus.AssetOptions{LeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	put(t, assets.Owners, "server.alpha.0", `{"runner":"r1","server":"alpha","replica":0,"since":"2026-11-28T00:00:01Z"}`)
	there := time.Now()
	call, release := tieWhenFollowed(t, w, "alpha")
	defer release()
	// Soon after the bucket appears: a call sent meanwhile is not tied (it
	// took 2 s, and a chat turn's call in a split deployment went untied).
	if took := time.Since(there); took > time.Second {
		t.Errorf("calls were tied %s after the bucket appeared", took.Round(time.Millisecond))
	}
	if err := assets.Owners.Delete(t.Context(), "server.alpha.0"); err != nil {
		t.Fatal(err)
	}
	endedBy(t, call, 5*time.Second, "alpha")
}
