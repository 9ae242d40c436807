package runner

import (
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// TestLogBudgetCountsWhatItHolds: past its rate a budget logs nothing but
// counts, and the next record it lets through gets that count, once.
func TestLogBudgetCountsWhatItHolds(t *testing.T) {
	b := newLogBudget(rate.Every(200*time.Millisecond), 1)
	if ok, _ := b.take(); !ok {
		t.Fatal("the first record was held")
	}
	for i := range 3 {
		if ok, n := b.take(); ok || n != int64(i+1) {
			t.Fatalf("record %d within the interval: logged %v, count %d", i+2, ok, n)
		}
	}
	time.Sleep(250 * time.Millisecond)
	if ok, _ := b.take(); !ok {
		t.Fatal("a record after the interval was held")
	}
	if n := b.held(); n != 3 {
		t.Fatalf("held %d, want 3", n)
	}
	if n := b.held(); n != 0 {
		t.Fatalf("held %d after it was said, want 0", n)
	}
}
