package approvals_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/approvals"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/model"
)

// TestHoldAndDecideRideOutALeaderElection: the node leading the R3 bucket
// of held calls stops; a call held and decided right after succeeds within
// the caller's deadline. Before, the hold's first read went unanswered and
// the call waited out its whole deadline, then failed (a tool call that
// needs approval, on a cluster losing a node).
func TestHoldAndDecideRideOutALeaderElection(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	c, err := embednats.StartCluster(3, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	nc, err := c.Connect(nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := approvals.Open(ctx, ctx, nc, approvals.Options{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Hold(ctx, call(`{"n":1}`), nil); err != nil {
		t.Fatal(err)
	}
	leader := c.StreamLeader("KV_" + bus.BucketApprovals)
	if leader < 0 {
		t.Fatal("the approvals bucket has no leader")
	}
	c.StopNode(leader)
	start := time.Now()
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	h, err := s.Hold(wctx, call(`{"n":2}`), nil)
	if err != nil {
		t.Fatalf("hold %s after the leader stopped: %v", time.Since(start).Round(time.Millisecond), err)
	}
	t.Logf("hold answered %s after n%d (the leader) stopped", time.Since(start).Round(time.Millisecond), leader+1)
	got, err := s.Decide(wctx, model.ApprovalDecideRequest{ID: h.ID, Decision: model.DecisionApprove}, "admin", true, false)
	if err != nil || got.Decision != model.HeldApproved {
		t.Fatalf("decide after the leader stopped: %+v, %v", got, err)
	}
}
