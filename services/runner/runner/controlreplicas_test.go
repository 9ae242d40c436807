package runner_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// twoReplicas runs server alpha, whose TOKEN the resolver res answers, on
// runners r1 and r2 (runtime.replicas 2), both answering calls.
func twoReplicas(t *testing.T, res runner.SecretResolver) (*runnertest.Env, *runnertest.RunnerHandle) {
	t.Helper()
	opts := func(id string) runner.Options {
		o := ownershipOpts(id)
		o.Resolver = res
		return o
	}
	e := runnertest.Start(t, opts("r1"))
	r2 := e.AddRunner(t, opts("r2"))
	cfg := runnertest.Binary("alpha", testServer)
	cfg.ID = uuid.NewString()
	cfg.AuthType = model.AuthAPIKey
	cfg.Runtime.Eager, cfg.Runtime.Replicas = true, 2
	cfg.SecretScan.Results = model.SecretsOff // it reads its secret back through the env tool
	cfg.EnvVars = map[string]model.EnvVar{"TOKEN": {SecretRef: "TOKEN", IsSecret: true, Required: true}}
	e.Put(t, cfg)
	testkit.WaitFor(t, 20*time.Second, func() (bool, string) {
		st := e.Status("alpha")
		return st.Replicas == 2 && st.State == model.StateRunning, fmt.Sprintf("alpha on two replicas (%+v)", st)
	})
	launches := map[string]bool{}
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
		res, err := call(t, e, "alpha", "env", `{"name":"MCPBUS_LAUNCH"}`)
		if err != nil {
			t.Fatal(err)
		}
		launches[text(t, res)] = true
		return len(launches) == 2, fmt.Sprintf("calls reaching both replicas (%v)", launches)
	})
	return e, r2
}

// tokens calls env TOKEN n times (the queue group spreads the calls over
// the replicas) and counts the answers by value; a failed call counts
// under its error.
func tokens(t *testing.T, e *runnertest.Env, n int) map[string]int {
	t.Helper()
	seen := map[string]int{}
	for range n {
		res, err := call(t, e, "alpha", "env", `{"name":"TOKEN"}`)
		if err != nil {
			seen["error: "+err.Error()]++
			continue
		}
		seen[text(t, res)]++
	}
	return seen
}

// A secret changed restarts every replica of a replicated server that runs.
// Before, the restart (client.ApplySecrets, as cred set and the REST
// credentials routes send it) went to the server's control subject, the
// replicas' queue group: one replica restarted, the other went on with the
// old value (a revoked key kept being used).
func TestSecretRestartReachesEveryReplica(t *testing.T) {
	res := &changingResolver{}
	old, fresh := "old-secret-1", "new-secret-2"
	res.token.Store(&old)
	e, _ := twoReplicas(t, res)
	if seen := tokens(t, e, 10); seen[old] != 10 {
		t.Fatalf("before the change: %v", seen)
	}
	res.token.Store(&fresh) // cred set
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	restarted, err := e.Client.ApplySecrets(ctx, "alpha")
	if err != nil || !restarted {
		t.Fatalf("ApplySecrets = %v, %v; want a restart", restarted, err)
	}
	// The reply waited for both replicas: every call has the new value.
	if seen := tokens(t, e, 20); seen[fresh] != 20 {
		t.Fatalf("after the secret changed and ApplySecrets returned, of 20 calls: %v", seen)
	}
}

// mcpbus stop stops every replica, and start starts them all again. Before,
// stop reached one: calls went on running on the other.
func TestStopAndStartReachEveryReplica(t *testing.T) {
	res := &changingResolver{}
	tok := "secret-1"
	res.token.Store(&tok)
	e, _ := twoReplicas(t, res)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := e.Client.Runtime(ctx, "stop", "alpha")
	if err != nil || st.State != model.StateStopped {
		t.Fatalf("stop: %+v, %v", st, err)
	}
	if seen := tokens(t, e, 20); seen[tok] != 0 {
		t.Fatalf("after stop, of 20 calls: %v (want none to run)", seen)
	}
	if st, err = e.Client.Runtime(ctx, "start", "alpha"); err != nil || st.State != model.StateRunning {
		t.Fatalf("start: %+v, %v", st, err)
	}
	if seen := tokens(t, e, 20); seen[tok] != 20 {
		t.Fatalf("after start, of 20 calls: %v (want all to run)", seen)
	}
}

// A secret change restarts only the replicas that run: a stopped one stays
// stopped and takes the new value at its next start.
func TestSecretRestartLeavesStoppedReplicas(t *testing.T) {
	res := &changingResolver{}
	old, fresh := "old-secret-1", "new-secret-2"
	res.token.Store(&old)
	e, _ := twoReplicas(t, res)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e.Client.Runtime(ctx, "stop", "alpha"); err != nil {
		t.Fatal(err)
	}
	res.token.Store(&fresh)
	restarted, err := e.Client.ApplySecrets(ctx, "alpha")
	if err != nil || restarted {
		t.Fatalf("ApplySecrets = %v, %v; want no restart of a stopped server", restarted, err)
	}
	if seen := tokens(t, e, 10); seen[old]+seen[fresh] != 0 {
		t.Fatalf("after ApplySecrets on the stopped server, of 10 calls: %v (want none to run)", seen)
	}
}

// A replica whose runner is gone (cut off, its lease not yet lapsed) does
// not hold up a restart: the others restart and the reply says so at once,
// not when the caller's time runs out.
func TestRestartWithAReplicaDown(t *testing.T) {
	res := &changingResolver{}
	old, fresh := "old-secret-1", "new-secret-2"
	res.token.Store(&old)
	e, r2 := twoReplicas(t, res)
	r2.Disconnect(t, e)
	res.token.Store(&fresh)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	began := time.Now()
	st, err := e.Client.Runtime(ctx, "restart", "alpha")
	if err != nil || st.State != model.StateRunning {
		t.Fatalf("restart with a replica down: %+v, %v", st, err)
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Fatalf("the restart took %s: it waited for the replica that is down", took)
	}
	if seen := tokens(t, e, 10); seen[fresh] != 10 {
		t.Fatalf("after the restart, of 10 calls: %v", seen)
	}
}
