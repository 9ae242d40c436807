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
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/services/gateway/internal/runnerwatch"
)

// owners starts an embedded server and returns KV mcp_owners as the runners
// make it, with a lease TTL of ttl, and a Watch following it.
func owners(t *testing.T, ttl time.Duration) (jetstream.KeyValue, *runnerwatch.Watch) {
	t.Helper()
	ns, err := embednats.Start(embednats.Options{Port: -1, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	nc, err := ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
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
		ctx, release := w.Tie(t.Context(), server)
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
		t.Fatalf("the call of %s did not end within %s of its runner's end", server, within)
	}
	cause := context.Cause(ctx)
	if !errors.Is(cause, client.ErrRunnerGone) || apierr.Of(cause) != apierr.ServiceUnavailable ||
		!strings.Contains(cause.Error(), "server "+server) || !strings.Contains(cause.Error(), "may or may not have run") {
		t.Fatalf("cause = %v, want SERVICE_UNAVAILABLE wrapping ErrRunnerGone naming %s", cause, server)
	}
}

// A runner's deleted heartbeat ends the calls tied to it, and only those.
func TestHeartbeatGoneEndsTheRunnersCalls(t *testing.T) {
	kv, w := owners(t, time.Minute)
	put(t, kv, "runner.r1", `{"runner":"r1"}`)
	put(t, kv, "runner.r2", `{"runner":"r2"}`)
	put(t, kv, "server.alpha.0", `{"runner":"r1","server":"alpha","replica":0}`)
	put(t, kv, "server.beta.0", `{"runner":"r2","server":"beta","replica":0}`)
	put(t, kv, "server.multi.0", `{"runner":"r1","server":"multi","replica":0}`)
	put(t, kv, "server.multi.1", `{"runner":"r2","server":"multi","replica":1}`)

	alpha, releaseAlpha := tieWhenFollowed(t, w, "alpha")
	defer releaseAlpha()
	beta, releaseBeta := tieWhenFollowed(t, w, "beta")
	defer releaseBeta()
	// Several replicas: which one took the call is unknown, so it is not tied.
	if multi, release := w.Tie(t.Context(), "multi"); multi != t.Context() {
		release()
		t.Fatal("a call of a server with two holders was tied")
	}
	if none, release := w.Tie(t.Context(), "nobody-holds-it"); none != t.Context() {
		release()
		t.Fatal("a call of a server nobody holds was tied")
	}
	// A released call is no longer ended by its runner's end.
	released, release := tieWhenFollowed(t, w, "alpha")
	release()

	if err := kv.Delete(t.Context(), "runner.r1"); err != nil {
		t.Fatal(err)
	}
	endedBy(t, alpha, 5*time.Second, "alpha")
	if !errors.Is(context.Cause(released), context.Canceled) {
		t.Fatalf("a released call ended with %v", context.Cause(released))
	}
	time.Sleep(100 * time.Millisecond)
	if beta.Err() != nil {
		t.Fatalf("another runner's call ended: %v", context.Cause(beta))
	}
	// The lease moves to r2 (a takeover): the server's calls go with it.
	put(t, kv, "server.alpha.0", `{"runner":"r2","server":"alpha","replica":0}`)
	moved, releaseMoved := tieWhenFollowed(t, w, "alpha")
	defer releaseMoved()
	if err := kv.Purge(t.Context(), "runner.r2"); err != nil {
		t.Fatal(err)
	}
	endedBy(t, beta, 5*time.Second, "beta")
	endedBy(t, moved, 5*time.Second, "alpha")
}

// A runner that stops renewing (killed) loses its heartbeat to the bucket's
// TTL: the marker the server writes then ends its calls within about a
// lease's time.
func TestHeartbeatExpiryEndsTheRunnersCalls(t *testing.T) {
	kv, w := owners(t, time.Second)
	put(t, kv, "runner.r1", `{"runner":"r1"}`)
	put(t, kv, "server.alpha.0", `{"runner":"r1","server":"alpha","replica":0}`)
	start := time.Now()
	call, release := tieWhenFollowed(t, w, "alpha")
	defer release()
	endedBy(t, call, 10*time.Second, "alpha")
	if took := time.Since(start); took < 900*time.Millisecond {
		t.Fatalf("the call ended after %s, before the heartbeat's TTL of 1s", took)
	}
}
