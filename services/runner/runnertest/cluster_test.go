package runnertest_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/runner/internal/sandbox"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

var testServer, runnerBin string

func TestMain(m *testing.M) {
	testkit.Main(m, &testServer, testkit.WithBinary(&runnerBin, runnertest.BuildRunner))
}

// TestClusterRunnerProcess: a runner process on a 3-node cluster runs a
// server and answers a call; killed, it takes its MCP child with it.
func TestClusterRunnerProcess(t *testing.T) {
	began := time.Now()
	e := runnertest.StartClusterEnv(t, 3)
	t.Logf("cluster and assets ready in %s", time.Since(began).Round(time.Millisecond))

	step := time.Now()
	p := e.StartRunner(t, runnerBin, "r1", 0)
	t.Logf("runner process %d answers in %s", p.PID(), time.Since(step).Round(time.Millisecond))
	if ids := e.RunnerIDs(); len(ids) != 1 || ids[0] != "r1" {
		t.Fatalf("runners answering: %v, want [r1]", ids)
	}

	step = time.Now()
	e.Put(t, runnertest.Binary("alpha", testServer))
	st := e.WaitState(t, "alpha", model.StateRunning, 20*time.Second)
	t.Logf("alpha running in %s, pid %d, runner %s", time.Since(step).Round(time.Millisecond), st.PID, st.Runner)
	if st.Runner != "r1" || !runnertest.Alive(st.PID) {
		t.Fatalf("status %+v: want runner r1 and a live pid", st)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := e.Client.Call(ctx, "alpha", "echo", json.RawMessage(`{"message":"over the cluster"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(res), "over the cluster") {
		t.Fatalf("echo answered %s", res)
	}

	// The runner kept the assets as replicated as the env made them.
	for _, kv := range []jetstream.KeyValue{e.Assets.Configs, e.Assets.Status, e.Assets.Owners} {
		s, err := kv.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r := s.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Replicas; r != 3 {
			t.Errorf("bucket %s has %d replicas after the runner started, want 3", s.Bucket(), r)
		}
	}

	step = time.Now()
	p.Kill()
	runnertest.WaitGone(t, st.PID, 3*time.Second)
	t.Logf("MCP child gone %s after SIGKILL of the runner", time.Since(step).Round(time.Millisecond))
	t.Logf("whole test %s", time.Since(began).Round(time.Millisecond))
}

// TestRestartedRunnerEndsOrphanedHelpers: a runner process killed with
// SIGKILL takes its MCP children with it (Pdeathsig) but not the helpers they
// started under setsid or by a double fork; the next runner started on the
// same data dir ends them before it does anything else. Both of a running
// server's, and of one still starting (it never answers the handshake).
// Before, that runner killed the recorded process group only, and only
// while its leader lived (Pdeathsig had killed it): the helpers lived on; and
// a server was recorded only once running.
// Under the uid switch too: the runner reads the environments of the
// children's uid.
// With PID namespaces (the default where the host allows them) the helpers
// end with the runner, the kernel ending each namespace with its init; the
// reap is for hosts that refuse them: --child-pid-namespace off here.
func TestRestartedRunnerEndsOrphanedHelpers(t *testing.T) {
	t.Run("pid-namespace", func(t *testing.T) {
		if s, err := sandbox.New(sandbox.Config{}); err != nil || !s.PIDNamespace() {
			t.Skip("this host refuses PID namespaces")
		}
		restartedRunnerReaps(t, testServer)
	})
	t.Run("runner-uid", func(t *testing.T) { restartedRunnerReaps(t, testServer, "--child-pid-namespace", "off") })
	t.Run("child-uid", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("the uid switch needs root (CI runs as root)")
		}
		restartedRunnerReaps(t, worldReadable(t, testServer), "--child-pid-namespace", "off", "--child-uid", "65534")
	})
}

func restartedRunnerReaps(t *testing.T, mcpServer string, args ...string) {
	e := runnertest.StartClusterEnv(t, 1)
	data := t.TempDir()
	args = append([]string{"--data-dir", data}, args...)
	p := e.StartRunner(t, runnerBin, "r1", 0, args...)

	type server struct {
		name, state string
		dir         string
		id          string
		pid         int // the leader's, 0 while starting
	}
	servers := []*server{{name: "alpha", state: model.StateRunning}, {name: "slow", state: model.StateStarting}}
	for _, sv := range servers {
		sv.dir = openDir(t) // named in the server's environment: the sandbox grants it
		script := filepath.Join(sv.dir, "server.sh")
		if err := os.WriteFile(script, []byte(`#!/bin/sh
`+runnertest.RecordPID("$HELPERS/setsid", "setsid sh -c", "sleep 600")+` </dev/null >/dev/null 2>&1 &
( `+runnertest.RecordPID("$HELPERS/orphan", "setsid sh -c", "sleep 601")+` </dev/null >/dev/null 2>&1 & )
exec "$@"
`), 0o755); err != nil {
			t.Fatal(err)
		}
		cfg := runnertest.Binary(sv.name, script, mcpServer)
		if sv.state == model.StateStarting {
			cfg = runnertest.Binary(sv.name, script, "sleep", "602") // never answers
		}
		cfg.Runtime.Eager = true
		cfg.EnvVars = map[string]model.EnvVar{"HELPERS": {Value: sv.dir}}
		sv.id = e.Put(t, cfg).ID
	}
	var helpers []int
	defer func() {
		for _, pid := range helpers {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}()
	for _, sv := range servers {
		sv.pid = e.WaitState(t, sv.name, sv.state, 20*time.Second).PID
		for _, name := range []string{"setsid", "orphan"} {
			path := filepath.Join(sv.dir, name)
			deadline := time.Now().Add(10 * time.Second)
			b, err := os.ReadFile(path)
			for ; err != nil && time.Now().Before(deadline); b, err = os.ReadFile(path) {
				time.Sleep(20 * time.Millisecond)
			}
			if err != nil {
				t.Fatal(err)
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil || !runnertest.Alive(pid) {
				t.Fatalf("%s's %s helper %q: not running (%v)", sv.name, name, b, err)
			}
			helpers = append(helpers, pid)
		}
	}

	p.Kill()
	if pid := servers[0].pid; pid > 0 {
		runnertest.WaitGone(t, pid, 3*time.Second)
	}
	if !slices.Contains(args, "off") {
		// Each server is the init of its PID namespace: the kernel ends
		// the rest with it, without waiting for the next runner.
		for _, pid := range helpers {
			runnertest.WaitGone(t, pid, 3*time.Second)
		}
		return
	}
	for _, pid := range helpers {
		if !runnertest.Alive(pid) {
			t.Fatalf("helper %d died with the runner: the test shows nothing", pid)
		}
	}
	// No server for the next runner to start: only what it reaps matters.
	for _, sv := range servers {
		e.Delete(t, sv.id)
	}

	e.StartRunner(t, runnerBin, "r2", 0, args...) // answers once the reap is done
	for _, pid := range helpers {
		runnertest.WaitGone(t, pid, 3*time.Second)
	}
	if left, _ := filepath.Glob(filepath.Join(data, "pids", "*")); len(left) != 0 {
		t.Fatalf("pid files left: %v", left)
	}
}

// openDir is a temporary directory open to every uid (the child's under
// --child-uid).
func openDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mcpbus-reap-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// worldReadable is a copy of the binary at path that every uid may run.
func worldReadable(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dir := openDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, filepath.Base(path))
	if err := os.WriteFile(out, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return out
}
