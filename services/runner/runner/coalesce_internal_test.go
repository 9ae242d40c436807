package runner

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A storm of list_changed notifications is one refresh waiting, not a
// goroutine and a re-list each; the next refresh waits for the interval.
func TestCoalescerCoalescesAStorm(t *testing.T) {
	var tr coalescer
	var runs atomic.Int32
	ran := make(chan time.Time, 4)
	schedule := func() {
		runs.Add(1)
		ran <- time.Now()
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10000 {
				tr.notify(toolsRefreshEvery, schedule)
			}
		}()
	}
	wg.Wait()
	<-ran
	if n := runs.Load(); n != 1 {
		t.Fatalf("80000 notifications scheduled %d refreshes before one ran, want 1", n)
	}
	start := time.Now()
	tr.started()
	for range 1000 {
		tr.notify(toolsRefreshEvery, schedule) // during the refresh: the next one, after the interval
	}
	select {
	case at := <-ran:
		if d := at.Sub(start); d < toolsRefreshEvery-10*time.Millisecond {
			t.Fatalf("the next refresh came %v after the last began, want at least %v", d, toolsRefreshEvery)
		}
	case <-time.After(5 * toolsRefreshEvery):
		t.Fatal("a notification during a refresh was lost")
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("%d refreshes, want 2", n)
	}
}
