package runner_test

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

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
	h[2].Disconnect()
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
