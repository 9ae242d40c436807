package runner_test

import (
	"context"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// waitBeats waits until every runner's heartbeat is in KV mcp_owners, and
// a heartbeat period more, so that each knows the others (their policy,
// their room): a runner's view of the bucket follows it through a watch,
// which a config put meanwhile may outrun.
func waitBeats(t *testing.T, e *runnertest.Env, ids ...string) {
	t.Helper()
	defer time.Sleep(ownershipOpts("").LeaseTTL / 2)
	deadline := time.Now().Add(5 * time.Second)
	for _, id := range ids {
		for {
			if _, err := e.Assets.Owners.Get(context.Background(), "runner."+id); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no heartbeat of %s", id)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// waitOn waits until name runs on runner id.
func waitOn(t *testing.T, e *runnertest.Env, name, id string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		st := e.Status(name)
		if st.State == model.StateRunning && st.Runner == id {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never ran on %s: %+v", name, id, e.Status(name))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A runner at its --max-servers limit leaves a new server to a live runner
// with room, though it is below its fair share.
func TestPlacementFullRunnerLeavesServerToRoom(t *testing.T) {
	e := runnertest.Start(t, ownershipOpts("roomy"))
	putEager(t, e, "s2", "s3")
	waitAllRunning(t, e, []string{"s2", "s3"}, 10*time.Second)
	full := ownershipOpts("full")
	full.MaxServers = 1
	e.AddRunner(t, full)
	waitBeats(t, e, "roomy", "full")
	// Three servers over two runners: the fair share is two, roomy holds
	// two, so the full runner takes s1 and fills its only slot.
	putEager(t, e, "s1")
	waitOn(t, e, "s1", "full", 10*time.Second)
	// The full runner is below its fair share, but has no slot: the new
	// server goes to roomy (before: it sat in error on full, max_servers).
	putEager(t, e, "x")
	waitOn(t, e, "x", "roomy", 10*time.Second)
	if st := e.Status("s1"); st.State != model.StateRunning || st.Runner != "full" {
		t.Fatalf("s1 moved: %+v", st)
	}
}

// When no runner has room, a new server is still owned, in error naming
// max_servers, and stays with its runner (no flapping); when a runner with
// room joins, it is handed over there and runs.
func TestPlacementAllFullThenHandOverToRoom(t *testing.T) {
	a := ownershipOpts("a")
	a.MaxServers = 1
	e := runnertest.Start(t, a)
	b := ownershipOpts("b")
	b.MaxServers = 1
	e.AddRunner(t, b)
	waitBeats(t, e, "a", "b")
	putEager(t, e, "s1", "s2")
	waitAllRunning(t, e, []string{"s1", "s2"}, 10*time.Second)
	if by := owners(e, []string{"s1", "s2"}); len(by["a"]) != 1 || len(by["b"]) != 1 {
		t.Fatalf("owners: %v", by)
	}
	putEager(t, e, "x")
	st := e.WaitState(t, "x", model.StateError, 10*time.Second)
	if st.Runner == "" || st.Field != model.StatusFieldMaxServers {
		t.Fatalf("x with both runners full: %+v", st)
	}
	holder := st.Runner
	// Over several lease periods it stays with that runner, waiting.
	until := time.Now().Add(4 * a.LeaseTTL)
	for time.Now().Before(until) {
		st = e.Status("x")
		if st.Runner != holder || st.State != model.StateError || st.Field != model.StatusFieldMaxServers {
			t.Fatalf("x left %s while no runner had room: %+v", holder, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A runner with room joins: x moves there and runs.
	e.AddRunner(t, ownershipOpts("c"))
	waitOn(t, e, "x", "c", 15*time.Second)
	waitAllRunning(t, e, []string{"s1", "s2", "x"}, 10*time.Second)
}
