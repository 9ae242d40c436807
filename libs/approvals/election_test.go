package approvals_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/approvals"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

// TestHoldAndDecideRideOutALeaderElection: the node leading the R3 bucket
// of held calls stops, and with it the node the store is connected to; a
// call held and decided right after succeeds within the caller's deadline.
// Before, the hold failed at once ("no responders": the request went out
// while the connection moved to another node).
func TestHoldAndDecideRideOutALeaderElection(t *testing.T) {
	c := testkit.Cluster(t, 3)
	// To n3 first, whose stop the test is about: the store's node dies with
	// the bucket's leader (a host lost), and its requests meet both the
	// reconnection and the election.
	nc, err := nats.Connect(c.URL(2)+","+c.URL(0)+","+c.URL(1), nats.DontRandomize(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
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
	const leader = 2
	testkit.LeadOn(t, nc, c, "KV_"+bus.BucketApprovals, "n3")
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
