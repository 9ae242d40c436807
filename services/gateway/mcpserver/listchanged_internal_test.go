package mcpserver

import (
	"fmt"
	"testing"

	"github.com/mcpbus/mcpbus/libs/model"
)

// A status change that moves no server in or out of those that ran (a busy
// server's call counts, every few seconds each) is handled under a.mu,
// which every /mcp request takes: it sorted and joined every server's name
// each time.
func TestTrackRanUnmovedAllocatesNothing(t *testing.T) {
	a := &Aggregator{catalogs: map[string]model.Catalog{}, running: map[string]bool{}, ran: map[string]bool{}}
	for i := range 200 {
		slug := fmt.Sprintf("s%03d", i)
		a.catalogs[slug] = model.Catalog{Server: slug}
		a.running[slug] = i%2 == 0
	}
	a.trackRan(true)
	if n := testing.AllocsPerRun(100, func() { a.trackRan(false) }); n != 0 {
		t.Errorf("an unmoved status change made %v allocations, want 0", n)
	}
	// What moves still counts: a server that runs for the first time.
	before := a.ranKey
	a.running["s001"] = true
	a.trackRan(false)
	if a.ranKey == before || !a.ran["s001"] {
		t.Error("a server running for the first time did not move the servers that ran")
	}
	// And one that left the catalog and stopped.
	delete(a.catalogs, "s000")
	a.running["s000"] = false
	a.trackRan(false)
	if a.ran["s000"] {
		t.Error("a server gone from the catalog stayed among those that ran")
	}
}
