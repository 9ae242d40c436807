package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

func ownershipOpts(id string) runner.Options {
	o := lifecycleOpts()
	o.ID = id
	o.LeaseTTL = 1500 * time.Millisecond
	return o
}

// threeRunners starts a bus with runners r1, r2, r3 that all see each other.
func threeRunners(t *testing.T) (*runnertest.Env, []*runnertest.RunnerHandle) {
	t.Helper()
	e := runnertest.Start(t, ownershipOpts("r1"))
	h2 := e.AddRunner(t, ownershipOpts("r2"))
	h3 := e.AddRunner(t, ownershipOpts("r3"))
	// Wait until every heartbeat is in, so each runner knows its fair share.
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := 0
		for _, id := range []string{"r1", "r2", "r3"} {
			if _, err := e.Assets.Owners.Get(context.Background(), "runner."+id); err == nil {
				n++
			}
		}
		if n == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d runner heartbeats", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return e, []*runnertest.RunnerHandle{nil, h2, h3}
}

// testServerProcs counts live test-server processes (zombies excluded).
func testServerProcs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range entries {
		cmd, err := os.ReadFile("/proc/" + d.Name() + "/cmdline")
		if err != nil || !strings.HasPrefix(string(cmd), testServer+"\x00") && string(cmd) != testServer {
			continue
		}
		var pid int
		if _, err := fmt.Sscan(d.Name(), &pid); err == nil && alive(pid) {
			n++
		}
	}
	return n
}

func putEager(t *testing.T, e *runnertest.Env, names ...string) {
	t.Helper()
	for _, name := range names {
		cfg := runnertest.Binary(name, testServer)
		cfg.Runtime.Eager = true
		e.Put(t, cfg)
	}
}

func owners(e *runnertest.Env, names []string) map[string][]string {
	by := map[string][]string{}
	for _, n := range names {
		st := e.Status(n)
		by[st.Runner] = append(by[st.Runner], n)
	}
	return by
}

func waitAllRunning(t *testing.T, e *runnertest.Env, names []string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok := true
		for _, n := range names {
			if e.Status(n).State != model.StateRunning {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			for _, n := range names {
				t.Logf("%s: %+v", n, e.Status(n))
			}
			t.Fatalf("not all running after %s", within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var sixServers = []string{"s1", "s2", "s3", "s4", "s5", "s6"}

// Six servers over three runners: two each, and every server runs exactly once.
func TestOwnershipSpreadsEvenlyAndNeverDoubles(t *testing.T) {
	e, _ := threeRunners(t)
	putEager(t, e, sixServers...)
	waitAllRunning(t, e, sixServers, 15*time.Second)
	by := owners(e, sixServers)
	if len(by) != 3 {
		t.Fatalf("owners: %v, want all three runners", by)
	}
	for id, servers := range by {
		if len(servers) != 2 {
			t.Fatalf("runner %s owns %v, want 2 of 6", id, servers)
		}
	}
	time.Sleep(2 * time.Second) // several lease periods: nothing may move or double
	if n := testServerProcs(t); n != 6 {
		t.Fatalf("%d test server processes for 6 servers", n)
	}
	for _, n := range sixServers {
		if res, err := call(t, e, n, "echo", `{"message":"`+n+`"}`); err != nil || text(t, res) != n {
			t.Fatalf("%s: %v", n, err)
		}
	}
}

// A runner that stops hands its servers over at once; the others take them.
func TestGracefulStopHandsOver(t *testing.T) {
	e, h := threeRunners(t)
	putEager(t, e, sixServers...)
	waitAllRunning(t, e, sixServers, 15*time.Second)
	moved := owners(e, sixServers)["r2"]
	begin := time.Now()
	h[1].Stop(t)
	for _, n := range moved {
		deadline := time.Now().Add(5 * time.Second)
		for {
			st := e.Status(n)
			if st.State == model.StateRunning && st.Runner != "r2" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not taken over: %+v", n, st)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Logf("handover of %d servers took %s", len(moved), time.Since(begin))
	if d := time.Since(begin); d > 3*time.Second {
		t.Fatalf("handover took %s; a graceful stop must not wait for the lease TTL", d)
	}
	for _, n := range moved {
		if _, err := call(t, e, n, "echo", `{"message":"x"}`); err != nil {
			t.Fatalf("%s after handover: %v", n, err)
		}
	}
	if n := testServerProcs(t); n != 6 {
		t.Fatalf("%d test server processes after handover, want 6", n)
	}
}

// A runner cut off the bus loses its servers to the others within the lease
// TTL plus a start, and stops its own copies so that no server runs twice
// for longer than the lease.
func TestFailoverAfterRunnerLoss(t *testing.T) {
	e, h := threeRunners(t)
	putEager(t, e, sixServers...)
	waitAllRunning(t, e, sixServers, 15*time.Second)
	lost := owners(e, sixServers)["r3"]
	var oldPIDs []int
	for _, n := range lost {
		oldPIDs = append(oldPIDs, e.Status(n).PID)
	}
	begin := time.Now()
	h[2].Disconnect(t, e)
	for _, n := range lost {
		deadline := begin.Add(10 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := e.Client.Call(ctx, n, "echo", []byte(`{"message":"x"}`), nil)
			cancel()
			if err == nil && e.Status(n).Runner != "r3" {
				break
			}
			if time.Now().After(deadline) {
				if f, ferr := os.Create("/tmp/failover-stacks.txt"); ferr == nil {
					_ = pprof.Lookup("goroutine").WriteTo(f, 2)
					f.Close()
				}
				t.Fatalf("%s not served again within 10s (last error %v): %+v", n, err, e.Status(n))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	failover := time.Since(begin)
	t.Logf("failover of %d servers: %s (lease TTL 1.5s)", len(lost), failover)
	for _, pid := range oldPIDs {
		waitGone(t, pid, 5*time.Second)
	}
	if n := testServerProcs(t); n != 6 {
		t.Fatalf("%d test server processes after failover, want 6", n)
	}
}

// Replicas: a server wanted on two runners runs on two and shares its calls;
// one wanted on five runs on the three there are and says so.
func TestReplicas(t *testing.T) {
	e, _ := threeRunners(t)
	two := runnertest.Binary("two", testServer)
	two.Runtime.Eager, two.Runtime.Replicas = true, 2
	e.Put(t, two)
	five := runnertest.Binary("five", testServer)
	five.Runtime.Eager, five.Runtime.Replicas = true, 5
	e.Put(t, five)
	deadline := time.Now().Add(15 * time.Second)
	for {
		if testServerProcs(t) == 5 && e.Status("two").Replicas == 2 && e.Status("five").Replicas == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replicas: %d processes, two=%+v five=%+v", testServerProcs(t), e.Status("two"), e.Status("five"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st := e.Status("five"); st.ReplicasWanted != 5 {
		t.Fatalf("five: %+v", st)
	}
	for i := 0; i < 20; i++ {
		if _, err := call(t, e, "two", "echo", `{"message":"r"}`); err != nil {
			t.Fatal(err)
		}
	}
}

// fakeRunners holds heartbeats and leases in KV mcp_owners for runners that
// do nothing else, renewing them until the test ends, so that a test can put
// the real runner in an exact placement.
type fakeRunners struct {
	t    *testing.T
	e    *runnertest.Env
	mu   sync.Mutex
	keys map[string]string // key → fake runner id
}

func newFakeRunners(t *testing.T, e *runnertest.Env, every time.Duration) *fakeRunners {
	f := &fakeRunners{t: t, e: e, keys: map[string]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				f.mu.Lock()
				for key, id := range f.keys {
					f.put(ctx, key, id)
				}
				f.mu.Unlock()
			}
		}
	}()
	return f
}

func (f *fakeRunners) put(ctx context.Context, key, id string) {
	c, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	val := fmt.Sprintf(`{"runner":%q}`, id)
	if _, err := f.e.Assets.Owners.Put(c, key, []byte(val)); err != nil && ctx.Err() == nil {
		f.t.Errorf("fake %s: put %s: %v", id, key, err)
	}
}

// hold makes runner id hold keys (heartbeats "runner.<id>", leases
// "server.<slug>.<replica>") from now on.
func (f *fakeRunners) hold(id string, keys ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, key := range keys {
		f.keys[key] = id
		f.put(context.Background(), key, id)
	}
}

// ownerOf reads who holds a lease key ("" when nobody does) and since when.
func ownerOf(e *runnertest.Env, key string) (string, time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	entry, err := e.Assets.Owners.Get(ctx, key)
	if err != nil {
		return "", time.Time{}
	}
	var v struct {
		Runner string    `json:"runner"`
		Since  time.Time `json:"since"`
	}
	_ = json.Unmarshal(entry.Value(), &v)
	return v.Runner, v.Since
}

// A replica no other runner can take is taken by the runner that can, even
// at its fair share, and is not handed away again. The placement of the bug
// seen with 12 leases on 3 runners: r1 holds 4 single servers (its fair
// share), r2 and r3 each hold one replica of the 3-replica server "three"
// (a runner holds at most one replica of a server), so only r1 can run the
// third. r2 and r3 are fakes that only hold their keys, so the placement is
// exact whatever order r1 walks the servers in.
func TestStrandedReplicaIsTakenAtFairShare(t *testing.T) {
	e := runnertest.Start(t, ownershipOpts("r1"))
	fakes := newFakeRunners(t, e, 300*time.Millisecond)
	singles := []string{"s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9"}
	// s5..s9 are held elsewhere before r1 sees them; r1, alone, takes s1..s4.
	fakes.hold("r2", "server.s5.0", "server.s6.0", "server.s7.0")
	fakes.hold("r3", "server.s8.0", "server.s9.0")
	for _, name := range singles {
		e.Put(t, runnertest.Binary(name, testServer))
	}
	waitOwner := func(key, want string, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			got, _ := ownerOf(e, key)
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s held by %q, want %q", key, got, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, s := range singles[:4] {
		waitOwner("server."+s+".0", "r1", 10*time.Second)
	}
	// Now r2 and r3 announce themselves, each with a replica of "three":
	// fair share (9 + 3) / 3 = 4, which r1 already holds.
	fakes.hold("r2", "runner.r2", "server.three.0")
	fakes.hold("r3", "runner.r3", "server.three.1")
	time.Sleep(300 * time.Millisecond) // r1 follows the owners bucket
	three := runnertest.Binary("three", testServer)
	three.Runtime.Replicas = 3
	e.Put(t, three)
	waitOwner("server.three.2", "r1", 5*time.Second)
	// A fourth runner joins, already at the new fair share (12 / 4 = 3, its
	// leases are of servers r1 does not serve): r1 now holds more than its
	// share + 1, but nobody could take what it would hand over, so nothing
	// moves for several lease periods.
	mine := map[string]time.Time{}
	for _, key := range []string{"server.s1.0", "server.s2.0", "server.s3.0", "server.s4.0", "server.three.2"} {
		_, mine[key] = ownerOf(e, key)
	}
	fakes.hold("r4", "server.x1.0", "server.x2.0", "server.x3.0")
	fakes.hold("r4", "runner.r4")
	time.Sleep(3 * time.Second)
	for key, since := range mine {
		if got, at := ownerOf(e, key); got != "r1" || !at.Equal(since) {
			t.Fatalf("%s: held by %q since %s, want r1 since %s (handed over and taken back?)", key, got, at, since)
		}
	}
}

// Runners with different policies: a server one runner refuses goes to a
// runner that accepts it. A refusing runner alone takes it, to report why it
// does not run, and hands it over when a runner that accepts it joins.
func TestPlacementFollowsPolicies(t *testing.T) {
	strict := ownershipOpts("strict")
	strict.ExecTypes = []string{model.PackageNPM, model.PackageDocker, model.PackageHTTP}
	e := runnertest.Start(t, strict)
	putEager(t, e, "bin")
	// Alone, the strict runner reports the refusal.
	st := e.WaitState(t, "bin", model.StateError, 10*time.Second)
	if st.Runner != "strict" || st.Code != string(apierr.Validation) || st.Field != "package.type" {
		t.Fatalf("refused alone: %+v", st)
	}
	// A runner that accepts binaries joins: the server moves there and runs.
	e.AddRunner(t, ownershipOpts("open"))
	deadline := time.Now().Add(15 * time.Second)
	for {
		st = e.Status("bin")
		if st.State == model.StateRunning && st.Runner == "open" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server never moved to the runner that accepts it: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A second binary server goes straight to the open runner, though the
	// strict one holds nothing and is below its fair share.
	putEager(t, e, "bin2")
	waitAllRunning(t, e, []string{"bin", "bin2"}, 10*time.Second)
	if by := owners(e, []string{"bin", "bin2"}); len(by["open"]) != 2 {
		t.Fatalf("owners: %v", by)
	}
	lease, err := e.Assets.Owners.Get(context.Background(), "server.bin2.0")
	if err != nil || !strings.Contains(string(lease.Value()), `"runner":"open"`) {
		t.Fatalf("bin2's lease: %v %s", err, lease.Value())
	}
}
