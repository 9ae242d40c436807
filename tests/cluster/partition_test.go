package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// partitionBound is how long r3's servers may stay unanswered after n3 is
// cut off: the owners bucket's election (4-9 s), the lapse, a start.
const partitionBound = 15 * time.Second

// TestPartitionedRunnerGivesUp: node n3, leading the owners bucket, is cut
// off from n1 and n2 (its routes; runner r3 and a caller stay connected to
// it). No renewal finds a quorum until n1 and n2 elect a leader: r3's
// leases lapse, r1 and r2 run its servers, and r3 stops its copies, so no
// server runs twice for longer than a lease. The caller on n3 gets an error
// for every call at once. Once the partition heals, every server runs
// once, on the runner holding its lease, with no manual step: before, a
// runner that lost leases just taken (a TTL marker stored after the
// election) still counted them as its own, and three servers stayed
// unowned for over 20 s after the heal (2 runs of 3).
func TestPartitionedRunnerGivesUp(t *testing.T) {
	var pc *testkit.Partitioned
	f := newFixtureOn(t, func() *runnertest.ClusterEnv {
		pc = testkit.PartitionCluster(t, 3)
		return runnertest.StartClusterEnvOn(t, pc.Cluster, nats.DontRandomize()) // on n1
	})
	testkit.LeadOn(t, f.e.NC, pc.Cluster, "KV_"+bus.BucketOwners, "n3")
	sts := f.waitAllRunning(10 * time.Second)
	f.checkOnePerServer(sts)
	cut := byRunner(sts)["r3"]
	if len(cut) == 0 {
		t.Fatalf("ownership %v: r3 runs nothing", byRunner(sts))
	}
	var oldPIDs []int
	for _, s := range cut {
		oldPIDs = append(oldPIDs, sts[s].PID)
	}
	mnc, err := nats.Connect(pc.URL(2))
	if err != nil {
		t.Fatal(err)
	}
	defer mnc.Close()
	minority := client.New(mnc, client.Options{})
	t.Logf("ownership %v; cutting n3 off", byRunner(sts))

	sampler := startSampler(len(servers))
	start := time.Now()
	pc.Isolate(2)
	deadline := start.Add(partitionBound)
	for _, s := range cut {
		for st := f.e.Status(s); st.Runner == "r3" || st.State != model.StateRunning || !runnertest.Alive(st.PID); st = f.e.Status(s) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: status %+v %s after cutting n3 off, want running on another runner", s, st, partitionBound)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	taken := since(start)
	for _, pid := range oldPIDs {
		runnertest.WaitGone(t, pid, 5*leaseTTL)
	}
	gave := since(start)
	sampler.Stop()
	t.Logf("r3's servers %v running elsewhere %s after the cut; r3 stopped its copies %s after; test-server processes: max %d, longest stretch over %d: %s",
		cut, taken, gave, sampler.max, len(servers), sampler.longest.Round(time.Millisecond))
	if sampler.longest > leaseTTL {
		t.Errorf("a server ran twice for %s, longer than a lease (%s)", sampler.longest.Round(time.Millisecond), leaseTTL)
	}

	// The caller on n3 reaches no runner that holds a lease.
	for _, s := range servers {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		began := time.Now()
		_, err := minority.Call(ctx, s, "echo", json.RawMessage(`{"message":"x"}`), nil)
		cancel()
		t.Logf("call to %s from n3: %s: %v", s, since(began), err)
		if err == nil {
			t.Errorf("a call to %s from n3 was answered while n3 is cut off", s)
		} else if time.Since(began) >= callTimeout {
			t.Errorf("a call to %s from n3 waited out its timeout (%s) instead of failing: %v", s, callTimeout, err)
		}
	}

	start = time.Now()
	pc.Heal(2)
	f.waitBeats(runnerIDs, 10*time.Second)
	d := f.waitAnswered(servers, start, failoverBound)
	sampler = startSampler(len(servers))
	time.Sleep(2 * leaseTTL)
	after := f.waitAllRunning(10 * time.Second)
	f.checkOnePerServer(after)
	sampler.Stop()
	t.Logf("healed: all servers answered %s after; ownership %v; test-server processes: max %d", d.Round(time.Millisecond), byRunner(after), sampler.max)
	if sampler.max > len(servers) {
		t.Errorf("%d test-server processes at one point after healing, want %d", sampler.max, len(servers))
	}
	f.waitLeasesMatch(10 * time.Second)
}

// waitLeasesMatch waits until every server runs on the runner holding its
// lease in KV mcp_owners, as its status says.
func (f *fixture) waitLeasesMatch(within time.Duration) {
	f.tb.Helper()
	testkit.WaitFor(f.tb, within, func() (bool, string) {
		for _, s := range servers {
			st := f.e.Status(s)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			e, err := f.e.Assets.Owners.Get(ctx, model.LeaseKeyPrefix+s+".0")
			cancel()
			if err != nil {
				return false, s + ": reading its lease: " + err.Error()
			}
			var l model.Lease
			_ = json.Unmarshal(e.Value(), &l)
			if l.Runner != st.Runner || st.State != model.StateRunning {
				return false, fmt.Sprintf("%s: status %s on %s, lease held by %s", s, st.State, st.Runner, l.Runner)
			}
		}
		return true, ""
	})
}
