package procmem

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeProcess is an allocation counter a test moves by hand, and the
// releases it saw.
type fakeProcess struct {
	mu       sync.Mutex
	alloc    uint64
	releases atomic.Int32
}

func (f *fakeProcess) allocated() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.alloc
}

func (f *fakeProcess) allocate(n uint64) {
	f.mu.Lock()
	f.alloc += n
	f.mu.Unlock()
}

// startFake runs an idleReleaser with a 10 ms tick that releases after
// quiet ticks of quiet.
func startFake(t *testing.T, quiet int) *fakeProcess {
	t.Helper()
	f := &fakeProcess{}
	r := &idleReleaser{quiet: time.Duration(quiet) * 10 * time.Millisecond, tick: 10 * time.Millisecond,
		allocated: f.allocated, release: func() { f.releases.Add(1) }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.run(ctx, slog.New(slog.NewTextHandler(io.Discard, nil))); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return f
}

// busyFor allocates well above the busy threshold every tick for d.
func (f *fakeProcess) busyFor(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
		f.allocate(4 * busyBytesPerTick)
		time.Sleep(2 * time.Millisecond)
	}
}

// waitReleases waits up to 5 s for n releases and returns how many there were.
func (f *fakeProcess) waitReleases(n int32) int32 {
	for deadline := time.Now().Add(5 * time.Second); f.releases.Load() < n && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	return f.releases.Load()
}

func TestIdleReleaseOncePerLoad(t *testing.T) {
	f := startFake(t, 3)
	time.Sleep(100 * time.Millisecond)
	if n := f.releases.Load(); n != 0 {
		t.Fatalf("released %d times before any load", n)
	}
	f.busyFor(100 * time.Millisecond)
	if n := f.releases.Load(); n != 0 {
		t.Fatalf("released %d times during the load", n)
	}
	if n := f.waitReleases(1); n != 1 {
		t.Fatalf("after the load went quiet: %d releases, want 1", n)
	}
	// Quiet on: no second release until another load.
	time.Sleep(150 * time.Millisecond)
	if n := f.releases.Load(); n != 1 {
		t.Fatalf("quiet after the release: %d releases, want still 1", n)
	}
	f.busyFor(60 * time.Millisecond)
	if n := f.waitReleases(2); n != 2 {
		t.Fatalf("after a second load: %d releases, want 2", n)
	}
}

func TestIdleReleaseLightTrafficIsQuiet(t *testing.T) {
	f := startFake(t, 3)
	f.busyFor(50 * time.Millisecond)
	// A trickle below the threshold every tick counts as quiet.
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
		f.allocate(busyBytesPerTick / 8)
		time.Sleep(10 * time.Millisecond)
	}
	if n := f.releases.Load(); n != 1 {
		t.Fatalf("a trickle after the load: %d releases, want 1", n)
	}
}

func TestValidate(t *testing.T) {
	if err := (Options{IdleRelease: -time.Second}).Validate(); err == nil {
		t.Fatal("a negative --idle-release passed")
	}
	for _, d := range []time.Duration{0, time.Second} {
		if err := (Options{IdleRelease: d}).Validate(); err != nil {
			t.Fatalf("--idle-release %s: %v", d, err)
		}
	}
}
