package cluster

import (
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// victim is the runner owning the most servers (the first id on a tie).
func victim(by map[string][]string) string {
	best := ""
	for _, id := range runnerIDs {
		if best == "" || len(by[id]) > len(by[best]) {
			best = id
		}
	}
	return best
}

// killAndWait SIGKILLs the runner owning the most servers and measures the
// time until each of its servers answered a call again (the killed runner
// cannot answer, so another one did). It checks that the killed runner's MCP
// children died with it (Pdeathsig), that its servers now run on other
// runners, and that exactly one process per server runs. It returns the
// failover time, the killed runner and the new statuses.
func (f *fixture) killAndWait(sts map[string]model.Status) (time.Duration, string, map[string]model.Status) {
	f.tb.Helper()
	v := victim(byRunner(sts))
	slugs := byRunner(sts)[v]
	var oldPIDs []int
	for _, s := range slugs {
		oldPIDs = append(oldPIDs, sts[s].PID)
	}
	start := time.Now()
	f.procs[v].Kill()
	// Wait longer than the bound, so a slow failover is measured, not cut off.
	d := f.waitAnswered(slugs, start, 2*failoverBound)
	for _, pid := range oldPIDs {
		runnertest.WaitGone(f.tb, pid, 2*time.Second)
	}
	after := f.waitAllRunning(10 * time.Second) // statuses from live runners only
	for _, s := range slugs {
		if after[s].Runner == v {
			f.tb.Fatalf("%s still on the killed runner %s", s, v)
		}
	}
	f.checkOnePerServer(after)
	return d, v, after
}

// TestRunnerKillFailover: a runner is SIGKILLed; the others take its
// servers over once its leases expire, its MCP children die with it, and no
// server runs twice.
func TestRunnerKillFailover(t *testing.T) {
	f := newFixture(t)
	// Read until every status says running: a read may reach a replica
	// of the bucket that lags (the ready wait saw them all running).
	sts := f.waitAllRunning(10 * time.Second)
	by := byRunner(sts)
	for _, id := range runnerIDs {
		if len(by[id]) != 2 {
			t.Fatalf("ownership %v: want 2 servers per runner", by)
		}
	}
	f.checkOnePerServer(sts)
	t.Logf("ownership %v, test-server pids %v", by, statusPIDs(sts))

	d, v, after := f.killAndWait(sts)
	t.Logf("SIGKILL of %s → its %d servers answered by other runners in %s (lease TTL %s); ownership now %v",
		v, len(by[v]), d.Round(time.Millisecond), leaseTTL, byRunner(after))
	if d > failoverBound {
		t.Errorf("failover took %s, want ≤ %s", d.Round(time.Millisecond), failoverBound)
	}
}

// TestNATSNodeLossFailover: the NATS node a runner is connected to stops;
// the runner reconnects to another node, every server answers again within
// the bound, and no server runs twice once things settle. The node chosen
// leads the KV mcp_owners stream (the worst case: leases can be neither
// renewed nor taken until a new leader is elected). The node then comes back
// and nothing breaks.
func TestNATSNodeLossFailover(t *testing.T) {
	f := newFixture(t)
	// Read until every status says running: a read may reach a replica
	// of the bucket that lags (the ready wait saw them all running).
	sts := f.waitAllRunning(10 * time.Second)
	f.checkOnePerServer(sts)
	node := f.e.Cluster.StreamLeader("KV_mcp_owners")
	if node < 0 {
		node = 0
	}
	t.Logf("ownership %v; KV_mcp_owners leader n%d, meta leader n%d; stopping n%d (runner %s's node)",
		byRunner(sts), node+1, f.e.Cluster.MetaLeader()+1, node+1, runnerIDs[node])

	sampler := startSampler(len(servers))
	start := time.Now()
	f.e.Cluster.StopNode(node)
	stopped := since(start)
	d := f.waitAnswered(servers, start, 2*failoverBound)
	t.Logf("node n%d stopped in %s; all %d servers answered %s after the stop began (lease TTL %s)",
		node+1, stopped, len(servers), d.Round(time.Millisecond), leaseTTL)
	if d > failoverBound {
		t.Errorf("servers answered again only after %s, want ≤ %s", d.Round(time.Millisecond), failoverBound)
	}

	// A runner that lost its leases while JetStream had no leader gives its
	// servers up within a lease; others may have taken them meanwhile. After
	// two lease periods, one process per server must remain.
	time.Sleep(2 * leaseTTL)
	after := f.waitAllRunning(10 * time.Second)
	f.checkOnePerServer(after)
	f.waitAnswered(servers, time.Now(), failoverBound)
	sampler.Stop()
	t.Logf("settled: ownership %v; test-server processes: max %d, %d stretches over %d, longest %s",
		byRunner(after), sampler.max, sampler.overs, len(servers), sampler.longest.Round(time.Millisecond))
	if sampler.longest > leaseTTL {
		t.Errorf("more than %d test-server processes for %s, longer than a lease (%s)", len(servers), sampler.longest.Round(time.Millisecond), leaseTTL)
	}

	start = time.Now()
	if err := f.e.Cluster.RestartNode(node); err != nil {
		t.Fatal(err)
	}
	t.Logf("node n%d back in %s", node+1, since(start))
	sampler = startSampler(len(servers))
	f.waitAnswered(servers, time.Now(), failoverBound)
	time.Sleep(2 * leaseTTL)
	after = f.waitAllRunning(10 * time.Second)
	f.checkOnePerServer(after)
	f.waitAnswered(servers, time.Now(), failoverBound)
	sampler.Stop()
	t.Logf("after the restart: ownership %v; test-server processes: max %d", byRunner(after), sampler.max)
	if sampler.max > len(servers) {
		t.Errorf("%d test-server processes at one point after the node came back, want %d", sampler.max, len(servers))
	}
}

// TestNoDoubleStartUnderChurn: the runners are restarted one by one
// (SIGTERM: a graceful handover, then a new process with the same id); all
// servers run again after each step, and no server runs twice at any sampled
// moment for longer than a lease.
func TestNoDoubleStartUnderChurn(t *testing.T) {
	waitProcCount(t, 0, 10*time.Second)
	const tolerance = 0
	sampler := startSampler(len(servers) + tolerance)
	defer sampler.Stop()
	f := newFixture(t)
	// Two rounds: the first starts from an even spread (2 each); in the
	// second, the restarted runners hold 0 or 3 (no rebalancing below fair+2).
	for round := 1; round <= 2; round++ {
		for i, id := range runnerIDs {
			start := time.Now()
			if err := f.procs[id].Stop(); err != nil {
				t.Fatal(err)
			}
			stopped := since(start)
			f.startRunner(id, i)
			sts := f.waitAllRunning(20 * time.Second)
			f.waitAnswered(servers, start, failoverBound)
			t.Logf("round %d: restarted %s (graceful stop %s): all running and answering %s after the stop began; ownership %v",
				round, id, stopped, since(start), byRunner(sts))
		}
	}
	f.checkOnePerServer(f.waitAllRunning(10 * time.Second))
	sampler.Stop()
	t.Logf("test-server processes over %d samples: max %d; %d stretches over %d, longest %s",
		sampler.samples, sampler.max, sampler.overs, len(servers)+tolerance, sampler.longest.Round(time.Millisecond))
	if sampler.longest > leaseTTL {
		t.Errorf("more than %d test-server processes for %s (max %d at %s), longer than a lease (%s)",
			len(servers)+tolerance, sampler.longest.Round(time.Millisecond), sampler.max, sampler.maxAt.Format("15:04:05.000"), leaseTTL)
	}
}

// TestFrozenRunnerGivesUp: the runner owning the most servers is frozen
// (SIGSTOP: a long GC pause, a suspended VM) for three lease periods. Its
// leases expire and the others take its servers over; its MCP children keep
// running meanwhile (nothing can stop them), so those servers run twice
// until it thaws. Once thawed (SIGCONT) it must find its leases gone at its
// next renewal and stop its copies within a lease, and the statuses must
// show the servers running on their new owners.
func TestFrozenRunnerGivesUp(t *testing.T) {
	f := newFixture(t)
	// Read until every status says running: a read may reach a replica
	// of the bucket that lags (the ready wait saw them all running).
	sts := f.waitAllRunning(10 * time.Second)
	f.checkOnePerServer(sts)
	v := victim(byRunner(sts))
	slugs := byRunner(sts)[v]
	var oldPIDs []int
	for _, s := range slugs {
		oldPIDs = append(oldPIDs, sts[s].PID)
	}
	p := f.procs[v]
	t.Cleanup(func() { _ = syscall.Kill(p.PID(), syscall.SIGCONT) }) // before the stop cleanup

	start := time.Now()
	if err := syscall.Kill(p.PID(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Calls are no measure here: the frozen runner still subscribes to its
	// servers' queue groups, so a call may go to it and time out (until it
	// thaws, or NATS drops its connection after missed pings, minutes).
	// The new owners' statuses are.
	deadline := start.Add(failoverBound)
	for _, s := range slugs {
		for st := f.e.Status(s); st.Runner == v || st.State != model.StateRunning || !runnertest.Alive(st.PID); st = f.e.Status(s) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: status %+v %s after freezing %s, want running on another runner", s, st, failoverBound, v)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Logf("froze %s; its servers %v running on other runners %s later", v, slugs, since(start))
	time.Sleep(time.Until(start.Add(3 * leaseTTL)))
	t.Logf("test-server processes while %s is frozen: %d (%d servers run twice)", v, len(testServerPIDs()), len(slugs))

	thawed := time.Now()
	if err := syscall.Kill(p.PID(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for _, pid := range oldPIDs {
		runnertest.WaitGone(t, pid, 3*leaseTTL)
	}
	gave := time.Since(thawed)
	t.Logf("thawed %s: its old children %v gone %s later", v, oldPIDs, gave.Round(time.Millisecond))
	if gave > leaseTTL {
		t.Errorf("the thawed runner stopped its copies %s after thawing, want within a lease (%s)", gave.Round(time.Millisecond), leaseTTL)
	}
	after := f.waitAllRunning(10 * time.Second)
	f.checkOnePerServer(after)
	d := f.waitAnswered(servers, thawed, failoverBound)
	t.Logf("after the thaw: all servers answered %s after SIGCONT; ownership %v", d.Round(time.Millisecond), byRunner(after))
}

// TestCutOffRunnerGivesUp: runner r1 reaches NATS (node n1) through a proxy
// that turns into a black hole: r1 can neither renew its leases nor learn
// anything, while r2 and r3 work on. Its leases expire, the others take its
// servers over, and r1 stops its own copies: no server runs twice for longer
// than a lease. Then the network heals and nothing runs twice.
func TestCutOffRunnerGivesUp(t *testing.T) {
	var px *proxy
	f := newFixture(t, func(f *fixture) {
		px = startProxy(t, f.e.Cluster.URL(0))
		f.urls["r1"] = px.URL()
	})
	// Read until every status says running: a read may reach a replica
	// of the bucket that lags (the ready wait saw them all running).
	sts := f.waitAllRunning(10 * time.Second)
	f.checkOnePerServer(sts)
	cut := byRunner(sts)["r1"]
	if len(cut) == 0 {
		t.Fatalf("ownership %v: r1 runs nothing", byRunner(sts))
	}
	var oldPIDs []int
	for _, s := range cut {
		oldPIDs = append(oldPIDs, sts[s].PID)
	}
	t.Logf("ownership %v; cutting r1 off", byRunner(sts))

	sampler := startSampler(len(servers))
	start := time.Now()
	px.Cut()
	deadline := start.Add(failoverBound)
	for _, s := range cut {
		for st := f.e.Status(s); st.Runner == "r1" || st.State != model.StateRunning || !runnertest.Alive(st.PID); st = f.e.Status(s) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: status %+v %s after cutting r1 off, want running on another runner", s, st, failoverBound)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	taken := since(start)
	for _, pid := range oldPIDs {
		runnertest.WaitGone(t, pid, 5*leaseTTL)
	}
	gave := since(start)
	time.Sleep(leaseTTL / 2)
	sampler.Stop()
	t.Logf("r1's servers %v running elsewhere %s after the cut; r1 stopped its copies %v %s after the cut; test-server processes: max %d, longest stretch over %d: %s",
		cut, taken, oldPIDs, gave, sampler.max, len(servers), sampler.longest.Round(time.Millisecond))
	if sampler.longest > leaseTTL {
		t.Errorf("a server ran twice for %s, longer than a lease (%s)", sampler.longest.Round(time.Millisecond), leaseTTL)
	}

	// What callers see meanwhile: r1's subscriptions stay on n1 until n1
	// notices the dead connection (missed pings: minutes by default).
	var ok, failed atomic.Int32
	var wg sync.WaitGroup
	for _, s := range cut {
		wg.Go(func() {
			for range 2 {
				if f.call(s) == nil {
					ok.Add(1)
				} else {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("calls to r1's former servers while r1 is cut off: %d answered, %d failed (%s timeout)", ok.Load(), failed.Load(), callTimeout)

	start = time.Now()
	px.Heal()
	f.waitBeats(runnerIDs, 10*time.Second)
	d := f.waitAnswered(servers, start, failoverBound)
	sampler = startSampler(len(servers))
	time.Sleep(2 * leaseTTL)
	after := f.waitAllRunning(10 * time.Second)
	f.checkOnePerServer(after)
	f.waitAnswered(servers, time.Now(), failoverBound)
	sampler.Stop()
	t.Logf("healed: r1 back and all servers answered %s after; ownership %v; test-server processes: max %d", d.Round(time.Millisecond), byRunner(after), sampler.max)
	if sampler.max > len(servers) {
		t.Errorf("%d test-server processes at one point after healing, want %d", sampler.max, len(servers))
	}
}
