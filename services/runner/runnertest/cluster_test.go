package runnertest_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
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
