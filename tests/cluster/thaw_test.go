package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// TestThawedRunnerRunsNoCall: a runner frozen (SIGSTOP: a paused
// container, a stalled VM) past its leases still subscribes to its servers'
// queue groups, so calls sent meanwhile wait in its socket. When it thaws
// it must not run them on the copies whose leases lapsed (other runners own
// those servers now), and the callers must not fail: the runner answers
// that the call did not run (bus.ErrNotRun) and the client sends it again,
// to the new owner. Before, about a third of the calls failed with
// SERVICE_UNAVAILABLE "server s2 is running" (the stale copy, stopping, had
// no session), though they had run nowhere.
func TestThawedRunnerRunsNoCall(t *testing.T) {
	runs := filepath.Join(t.TempDir(), "runs")
	f := newFixture(t, func(f *fixture) {
		f.env = map[string]model.EnvVar{"TESTMCP_RUN_FILE": {Value: runs}}
	})
	sts := f.statuses()
	v := victim(byRunner(sts))
	slug := byRunner(sts)[v][0]
	oldPID := sts[slug].PID
	p := f.procs[v]
	t.Cleanup(func() { _ = syscall.Kill(p.PID(), syscall.SIGCONT) })
	if err := syscall.Kill(p.PID(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	for st := f.e.Status(slug); st.Runner == v || st.State != model.StateRunning; st = f.e.Status(slug) {
		if time.Since(frozen) > failoverBound {
			t.Fatalf("%s: status %+v %s after freezing %s, want it on another runner", slug, st, failoverBound, v)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Calls now: the queue group picks among the new owner and the frozen
	// runner's stale subscription.
	const calls = 12
	var wg sync.WaitGroup
	outcome := make([]error, calls)
	for i := range calls {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 3*leaseTTL)
			defer cancel()
			_, outcome[i] = f.e.Client.Call(ctx, slug, "sleep", json.RawMessage(`{"ms":1}`), nil)
		})
	}
	time.Sleep(leaseTTL / 2)
	if err := syscall.Kill(p.PID(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("froze %s for %s; %s moved away", v, since(frozen), slug)
	wg.Wait()
	counts := map[string]int{}
	for _, err := range outcome {
		switch {
		case err == nil:
			counts["ok"]++
		default:
			counts[string(apierr.Of(err))]++
			t.Logf("call failed: %v", err)
		}
	}
	data, _ := os.ReadFile(runs)
	stale := strings.Count(string(data), fmt.Sprintf("sleep %d\n", oldPID))
	t.Logf("%d calls while %s was frozen: %v; run on the stale copy (pid %d): %d", calls, v, counts, oldPID, stale)
	if stale > 0 {
		t.Errorf("%d calls ran on %s's copy of %s after its lease lapsed", stale, v, slug)
	}
	if counts["ok"] != calls {
		t.Errorf("%d of %d calls failed, want none: each ran nowhere or on the new owner", calls-counts["ok"], calls)
	}
}
