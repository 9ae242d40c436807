package tasks

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

var testServer, runnerBin string

func TestMain(m *testing.M) {
	testkit.Main(m, &testServer, testkit.WithBinary(&runnerBin, runnertest.BuildRunner))
}

// TestOwnerKilledMidTask: two tasks run on one server, one of an idempotent
// tool and one of another; the runner process running them is SIGKILLed
// mid-call. The other runner takes the server over and runs the idempotent
// task again, once, to completion; the other task ends failed saying why,
// never run twice.
func TestOwnerKilledMidTask(t *testing.T) {
	e := runnertest.StartClusterEnv(t, 1)
	procs := map[string]*runnertest.RunnerProc{
		"r1": e.StartRunner(t, runnerBin, "r1", 0, "--lease-ttl", "1s"),
		"r2": e.StartRunner(t, runnerBin, "r2", 0, "--lease-ttl", "1s"),
	}
	runs := filepath.Join(t.TempDir(), "runs")
	cfg := runnertest.Binary("slow", testServer)
	cfg.Runtime.Eager = true
	cfg.EnvVars = map[string]model.EnvVar{"TESTMCP_RUN_FILE": {Value: runs}}
	e.Put(t, cfg)
	st := e.WaitState(t, "slow", model.StateRunning, 30*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	idem, err := e.Client.CreateTask(ctx, "slow", "sleep_idempotent", json.RawMessage(`{"ms":6000}`))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := e.Client.CreateTask(ctx, "slow", "sleep", json.RawMessage(`{"ms":6000}`))
	if err != nil {
		t.Fatal(err)
	}
	if !idem.Idempotent || plain.Idempotent {
		t.Fatalf("idempotent flags: %v %v", idem.Idempotent, plain.Idempotent)
	}
	for deadline := time.Now().Add(20 * time.Second); lines(runs) < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the tasks never both started: %q", read(runs))
		}
	}
	killed := time.Now()
	procs[st.Runner].Kill()
	t.Logf("owner %s SIGKILLed mid-call", st.Runner)

	final := func(id string) model.Task {
		for {
			task, err := e.Client.TaskResult(ctx, id, 10*time.Second)
			if apierr.Of(err) == apierr.Network && ctx.Err() == nil {
				// Handed to the killed runner before the bus saw it go:
				// never answered. Ask again, as a client polling must.
				t.Logf("task %s: %v; asking again", id, err)
				continue
			}
			if err != nil {
				// What the store and the status say, for the log.
				c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				for _, other := range []string{idem.ID, plain.ID} {
					rec, rerr := e.Client.Task(c, other)
					t.Logf("task %s now: %+v (%v)", other, rec, rerr)
				}
				t.Logf("status now: %+v; runs: %q", e.Status("slow"), read(runs))
				if keys, kerr := e.Assets.Owners.Keys(c); kerr == nil {
					for _, k := range keys {
						if v, gerr := e.Assets.Owners.Get(c, k); gerr == nil {
							t.Logf("owners %s = %s", k, v.Value())
						}
					}
				}
				t.Fatalf("task %s: %v", id, err)
			}
			if model.TaskFinal(task.State) {
				return task
			}
		}
	}
	got := final(idem.ID)
	t.Logf("idempotent task %s %s after the kill", got.State, time.Since(killed).Round(time.Millisecond))
	var res struct {
		Content []struct{ Text string } `json:"content"`
	}
	if got.State != model.TaskCompleted || got.Attempts != 2 || got.Runner == st.Runner ||
		json.Unmarshal(got.Result, &res) != nil || len(res.Content) != 1 || res.Content[0].Text != "slept 6000ms" {
		t.Fatalf("idempotent task: %+v", got)
	}
	failed := final(plain.ID)
	if failed.State != model.TaskFailed || failed.Attempts != 1 || !strings.Contains(failed.Message, "not marked idempotent") ||
		failed.Error == nil || failed.Error.Code != "SERVICE_UNAVAILABLE" {
		t.Fatalf("other task: %+v", failed)
	}
	// Three runs in all: both first runs and one re-run of the idempotent tool.
	if n := lines(runs); n != 3 || strings.Count(read(runs), "sleep_idempotent") != 2 {
		t.Fatalf("runs: %q", read(runs))
	}
}

func read(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

func lines(path string) int { return strings.Count(read(path), "\n") }
