package runner

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
)

// A burst of progress is written as its first notification at once and
// its newest when the interval ends, nothing in between and nothing after
// the run stopped; stop waits for a write under way.
func TestTaskProgressThrottle(t *testing.T) {
	const every = 200 * time.Millisecond
	type write struct {
		at time.Time
		p  model.TaskProgress
	}
	var (
		mu     sync.Mutex
		writes []write
	)
	var writing atomic.Bool
	p := newTaskProgress(every, func(ctx context.Context, tp model.TaskProgress) {
		writing.Store(true)
		defer writing.Store(false)
		time.Sleep(20 * time.Millisecond) // a KV write takes time
		mu.Lock()
		writes = append(writes, write{time.Now(), tp})
		mu.Unlock()
	})
	ctx, cancel := context.WithCancel(context.Background())
	go p.run(ctx)
	got := func() []write {
		mu.Lock()
		defer mu.Unlock()
		return append([]write(nil), writes...)
	}

	start := time.Now()
	p.note(model.TaskProgress{Progress: 1, Total: 100})
	deadline := time.Now().Add(5 * time.Second)
	for len(got()) < 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	for i := 2; i <= 50; i++ { // a burst during the pause after that write
		p.note(model.TaskProgress{Progress: float64(i), Total: 100})
	}
	for len(got()) < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(3 * every) // nothing more was noted: nothing more is written
	w := got()
	if len(w) != 2 {
		t.Fatalf("%d writes for one burst, want 2 (the first and the newest): %+v", len(w), w)
	}
	if w[0].p.Progress != 1 || w[1].p.Progress != 50 {
		t.Fatalf("written %v then %v, want 1 then 50 (the burst's last)", w[0].p.Progress, w[1].p.Progress)
	}
	if gap := w[1].at.Sub(w[0].at); gap < every {
		t.Fatalf("two writes %s apart, want at least %s", gap, every)
	}
	if first := w[0].at.Sub(start); first > every {
		t.Fatalf("the first progress waited %s: it must be written at once", first)
	}

	// A note during the pause after a write is written when it ends.
	p.note(model.TaskProgress{Progress: 60, Total: 100, Message: "late"})
	for len(got()) < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if w := got(); len(w) != 3 || w[2].p.Message != "late" {
		t.Fatalf("the trailing note was not written: %+v", w)
	}

	// stop waits for the write under way; nothing is written after it.
	p.note(model.TaskProgress{Progress: 70, Total: 100})
	for !writing.Load() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	p.stop(cancel)
	if writing.Load() {
		t.Fatal("stop returned while a write was under way")
	}
	n := len(got())
	p.note(model.TaskProgress{Progress: 80, Total: 100})
	time.Sleep(2 * every)
	if len(got()) != n {
		t.Fatalf("a progress noted after stop was written: %+v", got())
	}
	if last := p.last(); last == nil || last.Progress != 80 {
		t.Fatalf("last = %+v, want the newest noted (80)", last)
	}
}
