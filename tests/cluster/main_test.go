package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// leaseTTL is the runners' lease TTL (--lease-ttl).
const leaseTTL = 2 * time.Second

// failoverBound is how long servers may stay unanswered after a failure.
const failoverBound = 10 * time.Second

// callTimeout bounds one probing call; a call that fails is tried again.
const callTimeout = 2 * time.Second

var (
	testServer, runnerBin, mcpbusBin string
	// natsServerBin is a real nats-server, for nodes that crash (crash_test.go).
	natsServerBin string

	runnerIDs = []string{"r1", "r2", "r3"}
	servers   = []string{"s1", "s2", "s3", "s4", "s5", "s6"}
)

func TestMain(m *testing.M) {
	testkit.Main(m, &testServer, testkit.WithBinary(&runnerBin, runnertest.BuildRunner),
		testkit.WithBinary(&mcpbusBin, testkit.BuildCommand("mcpbus", "./tools/mcpbus")),
		testkit.WithBinary(&natsServerBin, testkit.BuildCommand("nats-server", "github.com/nats-io/nats-server/v2")))
}

// fixture is a 3-node cluster with runners r1..r3 (runner i on node i) and
// the six eager servers s1..s6, all running.
type fixture struct {
	tb    testing.TB
	e     *runnertest.ClusterEnv
	procs map[string]*runnertest.RunnerProc // the current process of each runner id
	// urls replaces a runner's --nats (by id).
	urls map[string]string
	// env is given to every server's config.
	env map[string]model.EnvVar
}

// newFixture starts the cluster, the runners and the servers; each of
// before runs once the cluster is up, before the runners start.
func newFixture(tb testing.TB, before ...func(*fixture)) *fixture {
	tb.Helper()
	return newFixtureOn(tb, func() *runnertest.ClusterEnv { return runnertest.StartClusterEnv(tb, 3) }, before...)
}

// newFixtureOn is newFixture on the 3-node cluster env starts.
func newFixtureOn(tb testing.TB, env func() *runnertest.ClusterEnv, before ...func(*fixture)) *fixture {
	tb.Helper()
	// A test before may have left processes a moment ago: start clean.
	waitProcCount(tb, 0, 10*time.Second)
	began := time.Now()
	f := &fixture{tb: tb, e: env(), procs: map[string]*runnertest.RunnerProc{}, urls: map[string]string{}}
	for _, fn := range before {
		fn(f)
	}
	for i, id := range runnerIDs {
		f.startRunner(id, i)
	}
	f.waitBeats(runnerIDs, 10*time.Second)
	f.checkRunnerNodes()
	for _, name := range servers {
		cfg := runnertest.Binary(name, testServer)
		cfg.Runtime.Eager = true
		cfg.EnvVars = f.env
		f.e.Put(tb, cfg)
	}
	f.waitAllRunning(30 * time.Second)
	tb.Logf("cluster, %d runners and %d servers ready in %s", len(runnerIDs), len(servers), since(began))
	return f
}

// startRunner starts (or restarts) runner id on node.
func (f *fixture) startRunner(id string, node int) *runnertest.RunnerProc {
	f.tb.Helper()
	args := []string{"--lease-ttl", leaseTTL.String()}
	if u := f.urls[id]; u != "" {
		args = append(args, "--nats", u) // the last --nats wins
	}
	p := f.e.StartRunner(f.tb, runnerBin, id, node, args...)
	f.procs[id] = p
	return p
}

// waitBeats waits until the heartbeat keys of ids are in KV mcp_owners.
func (f *fixture) waitBeats(ids []string, within time.Duration) {
	f.tb.Helper()
	deadline := time.Now().Add(within)
	for {
		var missing []string
		for _, id := range ids {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err := f.e.Assets.Owners.Get(ctx, "runner."+id)
			cancel()
			if err != nil {
				missing = append(missing, id)
			}
		}
		if len(missing) == 0 {
			// Give every runner's owner watch a moment to see the others,
			// so each knows its fair share before servers come.
			time.Sleep(100 * time.Millisecond)
			return
		}
		if time.Now().After(deadline) {
			f.tb.Fatalf("runner heartbeats missing after %s: %v", within, missing)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkRunnerNodes checks that every node has exactly one runner
// connection: runner i connects to the first URL it is given, node i's.
func (f *fixture) checkRunnerNodes() {
	f.tb.Helper()
	for i, n := range f.e.Cluster.Nodes {
		cz, err := n.Connz(&server.ConnzOptions{Limit: 1024})
		if err != nil {
			f.tb.Fatal(err)
		}
		runners := 0
		for _, c := range cz.Conns {
			if c.Name == "mcpbus-runner" {
				runners++
			}
		}
		if runners != 1 {
			f.tb.Fatalf("node %d has %d runner connections, want 1 (runner i connects to node i)", i, runners)
		}
	}
}

// statuses reads the status of every server.
func (f *fixture) statuses() map[string]model.Status {
	out := make(map[string]model.Status, len(servers))
	for _, s := range servers {
		out[s] = f.e.Status(s)
	}
	return out
}

// waitAllRunning waits until every server is running, on a live runner,
// with a live process, and returns the statuses.
func (f *fixture) waitAllRunning(within time.Duration) map[string]model.Status {
	f.tb.Helper()
	deadline := time.Now().Add(within)
	for {
		sts := f.statuses()
		ok := true
		for _, st := range sts {
			p := f.procs[st.Runner]
			if st.State != model.StateRunning || p == nil || p.Exited() || !runnertest.Alive(st.PID) {
				ok = false
			}
		}
		if ok {
			return sts
		}
		if time.Now().After(deadline) {
			for _, s := range servers {
				st := sts[s]
				f.tb.Logf("%s: state %q runner %q pid %d %s %s", s, st.State, st.Runner, st.PID, st.Code, st.Message)
			}
			f.tb.Fatalf("not all servers running after %s", within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// byRunner groups servers by the runner their status names.
func byRunner(sts map[string]model.Status) map[string][]string {
	out := map[string][]string{}
	for _, s := range servers {
		out[sts[s].Runner] = append(out[sts[s].Runner], s)
	}
	return out
}

// statusPIDs are the process ids the statuses name, sorted.
func statusPIDs(sts map[string]model.Status) []int {
	pids := make([]int, 0, len(sts))
	for _, st := range sts {
		pids = append(pids, st.PID)
	}
	sort.Ints(pids)
	return pids
}

// call calls echo on server slug once.
func (f *fixture) call(slug string) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	msg := "ping " + slug
	res, err := f.e.Client.Call(ctx, slug, "echo", json.RawMessage(`{"message":"`+msg+`"}`), nil)
	if err != nil {
		return err
	}
	if !strings.Contains(string(res), msg) {
		return fmt.Errorf("echo answered %s", res)
	}
	return nil
}

// waitAnswered calls every server in slugs, in parallel, retrying each until
// it answers, and returns how long after from the last one answered. It
// fails the test after within, naming the servers still silent.
func (f *fixture) waitAnswered(slugs []string, from time.Time, within time.Duration) time.Duration {
	f.tb.Helper()
	deadline := from.Add(within)
	var mu sync.Mutex
	last := time.Duration(0)
	lastErr := map[string]error{}
	var wg sync.WaitGroup
	for _, slug := range slugs {
		wg.Go(func() {
			for {
				err := f.call(slug)
				mu.Lock()
				if err == nil {
					last = max(last, time.Since(from))
					delete(lastErr, slug)
					mu.Unlock()
					return
				}
				lastErr[slug] = err
				mu.Unlock()
				if time.Now().After(deadline) {
					return
				}
				time.Sleep(25 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	if len(lastErr) > 0 {
		for slug, err := range lastErr {
			f.tb.Logf("%s still fails: %v", slug, err)
		}
		f.tb.Fatalf("%d servers not answered within %s", len(lastErr), within)
	}
	return last
}

// testServerPIDs are the live test-server processes (zombies excluded), sorted.
func testServerPIDs() []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, d := range entries {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile("/proc/" + d.Name() + "/cmdline")
		if err != nil || !strings.HasPrefix(string(cmd), testServer+"\x00") && string(cmd) != testServer {
			continue
		}
		if runnertest.Alive(pid) {
			pids = append(pids, pid)
		}
	}
	sort.Ints(pids)
	return pids
}

// waitProcCount waits until exactly n test-server processes run.
func waitProcCount(tb testing.TB, n int, within time.Duration) []int {
	tb.Helper()
	deadline := time.Now().Add(within)
	for {
		pids := testServerPIDs()
		if len(pids) == n {
			return pids
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d test-server processes %v after %s, want %d", len(pids), pids, within, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkOnePerServer checks that exactly one test-server process runs per
// server and that they are the ones the statuses name.
func (f *fixture) checkOnePerServer(sts map[string]model.Status) {
	f.tb.Helper()
	procs, named := testServerPIDs(), statusPIDs(sts)
	if !slices.Equal(procs, named) {
		for _, s := range servers {
			f.tb.Logf("%s: runner %s pid %d", s, sts[s].Runner, sts[s].PID)
		}
		f.tb.Fatalf("test-server processes %v, want exactly the %d the statuses name %v", procs, len(servers), named)
	}
}

// procSampler counts test-server processes every 20ms and keeps the
// maximum and the longest stretch with more than limit.
type procSampler struct {
	limit   int
	stop    chan struct{}
	done    chan struct{}
	samples int
	max     int
	maxAt   time.Time
	longest time.Duration // longest stretch over limit
	overs   int           // stretches over limit
}

func startSampler(limit int) *procSampler {
	s := &procSampler{limit: limit, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		var overSince time.Time
		for {
			now := time.Now()
			n := len(testServerPIDs())
			s.samples++
			if n > s.max {
				s.max, s.maxAt = n, now
			}
			// A stretch lasts from its first sample over the limit to the
			// first one under it (an upper bound, to the sampling period).
			if n > s.limit {
				if overSince.IsZero() {
					overSince = now
					s.overs++
				}
				s.longest = max(s.longest, now.Sub(overSince))
			} else if !overSince.IsZero() {
				s.longest = max(s.longest, now.Sub(overSince))
				overSince = time.Time{}
			}
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// Stop ends the sampling; the fields are final afterwards.
func (s *procSampler) Stop() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }
