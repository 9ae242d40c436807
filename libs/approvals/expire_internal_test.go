package approvals

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

// TestDecisionRacingTheTimeoutStands: an approver's decision that lands
// between a timed-out call's read and its removal (another instance whose
// clock is behind) is what the caller gets, not a denial that leaves the
// approval behind for the next identical call.
func TestDecisionRacingTheTimeoutStands(t *testing.T) {
	ns := testkit.NATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := Open(ctx, ctx, testkit.Connect(t, ns), Options{})
	if err != nil {
		t.Fatal(err)
	}
	behind := func() time.Time { return time.Now().Add(-time.Minute) }
	b, err := Open(ctx, ctx, testkit.Connect(t, ns), Options{Now: behind})
	if err != nil {
		t.Fatal(err)
	}
	rules := model.ApprovalRules{TimeoutSeconds: 1, Rules: []model.GatewayApprovalRule{{Tool: "fs__write", Decision: model.ApprovalAsk}}}
	if _, err := a.PutRules(ctx, rules); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(10 * time.Second); a.Check("key:x", "fs__write").Decision != model.ApprovalAsk; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("rules not seen")
		}
	}
	c := Call{Principal: "key:x", Server: "fs", Tool: "fs__write", Arguments: json.RawMessage(`{"path":"/a"}`)}
	decided := make(chan error, 1)
	a.beforeExpire = func() {
		a.beforeExpire = nil
		list, err := b.List(ctx, "operator", true)
		if err == nil && len(list) == 1 {
			_, err = b.Decide(ctx, model.ApprovalDecideRequest{ID: list[0].ID, Decision: model.DecisionApprove}, "operator", true, false)
		}
		decided <- err
	}
	msg, err := a.Enforce(ctx, c, nil)
	if derr := <-decided; derr != nil {
		t.Fatalf("the racing approval: %v", derr)
	}
	if err != nil || msg != "" {
		t.Fatalf("approved in the race, the call got %q, %v", msg, err)
	}
	if l, _ := a.List(ctx, "operator", true); len(l) != 0 {
		t.Fatalf("the approval was left for the next identical call: %+v", l)
	}
}
