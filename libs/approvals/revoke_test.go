package approvals_test

import (
	"encoding/json"
	"testing"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// DenyCallsOf denies the pending calls of one principal only, on any
// instance: an approver can no longer release them, a decided one keeps
// its decision, and another principal's call still waits.
func TestDenyCallsOf(t *testing.T) {
	a, b := two(t, askWrites)
	ctx := ctxT(t)
	mine, err := a.Hold(ctx, call(`{"p":"mine"}`), &askWrites.Rules[0])
	if err != nil {
		t.Fatal(err)
	}
	decided, err := a.Hold(ctx, call(`{"p":"decided"}`), &askWrites.Rules[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Decide(ctx, model.ApprovalDecideRequest{ID: decided.ID, Decision: model.DecisionApprove}, "key:bob", false, false); err != nil {
		t.Fatal(err)
	}
	other := call(`{"p":"other"}`)
	other.Principal = "key:y"
	theirs, err := a.Hold(ctx, other, &askWrites.Rules[0])
	if err != nil {
		t.Fatal(err)
	}
	n, err := b.DenyCallsOf(ctx, "key:x", "gateway", "the API key was revoked")
	if err != nil || n != 1 {
		t.Fatalf("DenyCallsOf: %d %v, want 1", n, err)
	}
	if _, err := a.Decide(ctx, model.ApprovalDecideRequest{ID: mine.ID, Decision: model.DecisionApprove}, "key:bob", false, false); apierr.Of(err) != apierr.Conflict {
		t.Fatalf("approving a denied call: %v, want CONFLICT", err)
	}
	for id, want := range map[string]string{mine.ID: model.HeldDenied, decided.ID: model.HeldApproved, theirs.ID: model.HeldPending} {
		h, err := a.Get(ctx, id)
		if err != nil || h.Decision != want {
			js, _ := json.Marshal(h)
			t.Errorf("held call %s: %s %v, want %s", id, js, err, want)
		}
	}
	if n, err := a.DenyCallsOf(ctx, "key:x", "gateway", "again"); err != nil || n != 0 {
		t.Fatalf("a second DenyCallsOf: %d %v, want 0", n, err)
	}
}
