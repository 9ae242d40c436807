package procmem

import (
	"context"
	"log/slog"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// busyBytesPerTick is the allocation in one tick above which the process
// counts as busy. Idle, `mcpbus up` allocates ~85 KB/s (heartbeats, leases,
// NATS pings); one tool call allocates tens of KB, so a few calls a second
// stay below it and a load is far above it.
const busyBytesPerTick = 1 << 20

// startIdleRelease watches the process's allocation rate once a second and,
// after a busy spell followed by quiet for the given duration, collects twice
// (the second empties sync.Pools, where JetStream keeps its block buffers)
// and returns the free heap to the OS. Without it the heap goal a load set
// stays resident until the runtime's forced collection (every two minutes)
// and its background scavenger catch up. It does nothing under load, or with
// quiet <= 0.
func startIdleRelease(ctx context.Context, quiet time.Duration, log *slog.Logger) {
	if quiet <= 0 {
		return
	}
	r := &idleReleaser{quiet: quiet, tick: time.Second, allocated: heapAllocated, release: func() {
		runtime.GC()
		debug.FreeOSMemory()
	}}
	go r.run(ctx, log)
}

// idleReleaser decides when to release; its inputs are fields so a test can
// drive it.
type idleReleaser struct {
	quiet, tick time.Duration
	allocated   func() uint64 // bytes allocated since the process started
	release     func()
}

func (r *idleReleaser) run(ctx context.Context, log *slog.Logger) {
	t := time.NewTicker(r.tick)
	defer t.Stop()
	last := r.allocated()
	var busy bool
	var quietFor time.Duration
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := r.allocated()
		delta := now - last
		last = now
		if delta >= busyBytesPerTick {
			busy, quietFor = true, 0
			continue
		}
		if !busy {
			continue
		}
		if quietFor += r.tick; quietFor < r.quiet {
			continue
		}
		start := time.Now()
		r.release()
		busy = false
		// Releasing allocates a little; count the next tick from after it.
		last = r.allocated()
		log.Debug("returned free memory to the OS after a load", "took", time.Since(start))
	}
}

// heapAllocated is the runtime's count of bytes allocated on the heap.
func heapAllocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}
