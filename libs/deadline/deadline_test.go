package deadline_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/deadline"
)

type valueKey struct{}

func ended(ctx context.Context, within time.Duration) bool {
	select {
	case <-ctx.Done():
		return true
	case <-time.After(within):
		return false
	}
}

func TestLimitEndsWithDeadlineExceeded(t *testing.T) {
	ctx, cancel := deadline.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	child, cancelChild := context.WithCancel(context.WithValue(ctx, valueKey{}, 1))
	defer cancelChild()
	if !ended(child, 2*time.Second) {
		t.Fatal("the limit did not end its child")
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) || !errors.Is(child.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err = %v, child's %v; want DeadlineExceeded for both", ctx.Err(), child.Err())
	}
	if _, ok := ctx.Deadline(); ok {
		t.Fatal("a pausable limit reports a fixed deadline")
	}
	if !errors.Is(context.Cause(child), context.DeadlineExceeded) {
		t.Fatalf("Cause = %v", context.Cause(child))
	}
}

func TestPauseStopsTheLimit(t *testing.T) {
	ctx, cancel := deadline.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	// Paused from a child context: the limit is found through it.
	child, cancelChild := context.WithCancel(ctx)
	defer cancelChild()
	time.Sleep(50 * time.Millisecond)
	before, _ := deadline.Left(ctx)
	resume := deadline.Pause(child)
	if ended(ctx, 400*time.Millisecond) {
		t.Fatal("the limit ran out while paused")
	}
	// A paused limit bounds nothing: a wait made meanwhile needs its own.
	if left, ok := deadline.Left(ctx); ok {
		t.Fatalf("Left = %s while the only limit is paused", left)
	}
	start := time.Now()
	resume()
	resume() // a second resume changes nothing
	if after, ok := deadline.Left(ctx); !ok || after > before || after < before-30*time.Millisecond {
		t.Fatalf("Left after the pause = %s (%v), want about the %s left before it", after, ok, before)
	}
	if !ended(ctx, 2*time.Second) {
		t.Fatal("the limit did not run out after resuming")
	}
	if took := time.Since(start); took > before+time.Second || took < before-20*time.Millisecond {
		t.Fatalf("after resuming it took %s to run out, want about %s", took, before)
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err = %v", ctx.Err())
	}
}

func TestPausesNestAndCoverEveryLimit(t *testing.T) {
	outer, cancelOuter := deadline.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancelOuter()
	inner, cancelInner := deadline.WithTimeout(outer, 100*time.Millisecond)
	defer cancelInner()
	r1 := deadline.Pause(inner)
	r2 := deadline.Pause(inner)
	r1()
	if ended(outer, 300*time.Millisecond) || inner.Err() != nil {
		t.Fatal("a limit counted while one pause of two was still on")
	}
	r2()
	if !ended(inner, 2*time.Second) || !ended(outer, 2*time.Second) {
		t.Fatal("the limits did not run out once both pauses resumed")
	}
}

func TestCancelAndParentEndTheLimit(t *testing.T) {
	ctx, cancel := deadline.WithTimeout(context.Background(), time.Hour)
	cancel()
	if !ended(ctx, time.Second) || !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("cancel: Err = %v", ctx.Err())
	}
	parent, cancelParent := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancelParent()
	ctx, cancel = deadline.WithTimeout(parent, time.Hour)
	defer cancel()
	resume := deadline.Pause(ctx) // a pause holds only its own limit, not the parent's deadline
	defer resume()
	if !ended(ctx, 2*time.Second) || !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("parent's deadline: Err = %v", ctx.Err())
	}
	if left, ok := deadline.Left(ctx); !ok || left > 0 {
		t.Fatalf("Left = %s, %v after the parent's deadline", left, ok)
	}
	resume()
	if left, ok := deadline.Left(ctx); !ok || left > 0 {
		t.Fatalf("Left = %s, %v of an ended limit", left, ok)
	}
	done, cancelDone := context.WithCancel(context.Background())
	cancelDone()
	ctx, cancel = deadline.WithTimeout(done, time.Hour)
	defer cancel()
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("made from an ended parent: Err = %v", ctx.Err())
	}
	deadline.Pause(ctx)() // nothing to pause
}

func TestLeftIsTheTightestLimit(t *testing.T) {
	if _, ok := deadline.Left(context.Background()); ok {
		t.Fatal("Left of a context without limits")
	}
	parent, cancelParent := context.WithTimeout(context.Background(), time.Minute)
	defer cancelParent()
	ctx, cancel := deadline.WithTimeout(parent, time.Second)
	defer cancel()
	if left, ok := deadline.Left(ctx); !ok || left > time.Second || left < 900*time.Millisecond {
		t.Fatalf("Left = %s, %v; want about 1s", left, ok)
	}
	wide, cancelWide := deadline.WithTimeout(context.Background(), time.Hour)
	defer cancelWide()
	narrow, cancelNarrow := context.WithTimeout(wide, time.Second)
	defer cancelNarrow()
	if left, ok := deadline.Left(narrow); !ok || left > time.Second {
		t.Fatalf("Left = %s, %v; want the child's deadline", left, ok)
	}
}

func TestAfterFuncRunsWhenTheLimitEnds(t *testing.T) {
	ctx, cancel := deadline.WithTimeout(context.Background(), time.Hour)
	ran := make(chan struct{})
	context.AfterFunc(ctx, func() { close(ran) })
	stopped := context.AfterFunc(ctx, func() { t.Error("a stopped AfterFunc ran") })
	if !stopped() {
		t.Fatal("stop did not stop")
	}
	cancel()
	select {
	case <-ran:
	case <-time.After(2 * time.Second):
		t.Fatal("AfterFunc did not run")
	}
	late := make(chan struct{})
	context.AfterFunc(ctx, func() { close(late) })
	select {
	case <-late:
	case <-time.After(2 * time.Second):
		t.Fatal("AfterFunc on an ended limit did not run")
	}
}

func TestPauseAndResumeConcurrently(t *testing.T) {
	ctx, cancel := deadline.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				deadline.Pause(ctx)()
				deadline.Left(ctx)
			}
		})
	}
	wg.Wait()
	if !ended(ctx, 5*time.Second) {
		t.Fatal("the limit never ran out after every pause resumed")
	}
}

func BenchmarkWithTimeout(b *testing.B) {
	b.Run("deadline", func(b *testing.B) {
		for b.Loop() {
			ctx, cancel := deadline.WithTimeout(context.Background(), time.Minute)
			c2, cancel2 := context.WithCancel(ctx)
			cancel2()
			_ = c2
			cancel()
		}
	})
	b.Run("context", func(b *testing.B) {
		for b.Loop() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			c2, cancel2 := context.WithCancel(ctx)
			cancel2()
			_ = c2
			cancel()
		}
	})
}
