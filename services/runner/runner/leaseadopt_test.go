package runner_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// A renewal of the runner's lease that JetStream applied but whose answer
// was lost (a leader change: CI's TestPartitionedRunnerGivesUp saw it at a
// partition's heal) leaves the lease one revision past what the runner
// knows. Its next renewal must see the lease is still its own and keep the
// server. Before, it handed the server over ("lease lost"), and as the
// lease named it still, nobody could take the server until the lease aged
// out: the server was down for a lease period or more.
func TestRenewalAppliedUnansweredKeepsTheServer(t *testing.T) {
	opts := lifecycleOpts()
	opts.LeaseTTL = 1500 * time.Millisecond
	logs := &testkit.LogBuffer{}
	opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	e := runnertest.Start(t, opts)
	e.Put(t, runnertest.Binary("alpha", testServer))
	st := e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	// What the lost answer leaves: the same lease, one revision on.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	key := model.LeaseKeyPrefix + "alpha.0"
	en, err := e.Assets.Owners.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Assets.Owners.Update(ctx, key, en.Value(), en.Revision()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * opts.LeaseTTL) // renewals meet the mismatch
	now := e.Status("alpha")
	if strings.Contains(logs.String(), "lease lost") || now.PID != st.PID || now.State != model.StateRunning {
		t.Fatalf("after the rewrite: status %+v (pid %d before); log:\n%s", now, st.PID, logs.String())
	}
}
