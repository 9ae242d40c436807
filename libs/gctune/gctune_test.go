package gctune

import (
	"runtime/debug"
	"testing"
)

func TestApply(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))

	t.Setenv("GOGC", "")
	debug.SetGCPercent(100)
	Apply()
	if got := debug.SetGCPercent(100); got != Percent {
		t.Fatalf("GOGC unset: GC percent %d, want %d", got, Percent)
	}

	// An operator's GOGC wins: Apply leaves the runtime's setting alone.
	t.Setenv("GOGC", "50")
	debug.SetGCPercent(50)
	Apply()
	if got := debug.SetGCPercent(100); got != 50 {
		t.Fatalf("GOGC=50: GC percent %d, want 50 kept", got)
	}
}
