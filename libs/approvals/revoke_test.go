package approvals_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/approvals"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
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

// ForgetCallsOf, through a store that only binds the bucket (BindHeld, as
// mcpbus up's host does), leaves nothing of one principal's: its pending
// call is denied (an approver can no longer release it) and its records,
// the approved one included, are gone, so the identical call made later
// under the same principal id (an agent made again with the name) is held
// anew rather than released by the old approval. Another principal's call
// still waits.
func TestForgetCallsOf(t *testing.T) {
	ns := testkit.NATS(t)
	ctx := ctxT(t)
	a, err := approvals.Open(ctx, ctx, testkit.Connect(t, ns), approvals.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.PutRules(ctx, askWrites); err != nil {
		t.Fatal(err)
	}
	hold := func(c approvals.Call) model.HeldCall {
		t.Helper()
		h, err := a.Hold(ctx, c, &askWrites.Rules[0])
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	mine := hold(call(`{"p":"mine"}`))
	approved := hold(call(`{"p":"approved"}`))
	if _, err := a.Decide(ctx, model.ApprovalDecideRequest{ID: approved.ID, Decision: model.DecisionApprove}, "key:bob", false, false); err != nil {
		t.Fatal(err)
	}
	other := call(`{"p":"other"}`)
	other.Principal = "key:y"
	theirs := hold(other)

	js, err := jetstream.New(testkit.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	host, err := approvals.BindHeld(ctx, js, nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := host.ForgetCallsOf(ctx, "key:x", "mcpbus-up", "the agent was revoked")
	if err != nil || n != 2 {
		t.Fatalf("ForgetCallsOf: %d %v, want 2", n, err)
	}
	if _, err := a.Decide(ctx, model.ApprovalDecideRequest{ID: mine.ID, Decision: model.DecisionApprove}, "key:bob", false, false); apierr.Of(err) != apierr.Conflict {
		t.Fatalf("approving a withdrawn call: %v, want CONFLICT", err)
	}
	for _, id := range []string{mine.ID, approved.ID} {
		if h, err := a.Get(ctx, id); apierr.Of(err) != apierr.NotFound {
			t.Errorf("held call %s after ForgetCallsOf: %+v %v, want NOT_FOUND", id, h, err)
		}
	}
	if h, err := a.Get(ctx, theirs.ID); err != nil || h.Decision != model.HeldPending {
		t.Errorf("another principal's call: %+v %v, want pending", h, err)
	}
	again := hold(call(`{"p":"approved"}`))
	if again.ID != approved.ID || again.Decision != model.HeldPending {
		t.Errorf("the identical call made again: %+v, want held anew (pending)", again)
	}
	if n, err := host.ForgetCallsOf(ctx, "key:nobody", "mcpbus-up", "again"); err != nil || n != 0 {
		t.Fatalf("ForgetCallsOf of a principal with no calls: %d %v", n, err)
	}
}

// BindHeld on a bus where nothing was ever held makes no bucket.
func TestBindHeldWithoutBucket(t *testing.T) {
	ns := testkit.NATS(t)
	js, err := jetstream.New(testkit.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := approvals.BindHeld(ctxT(t), js, nil); !errors.Is(err, approvals.ErrNoHeldCalls) {
		t.Fatalf("BindHeld without a bucket: %v, want ErrNoHeldCalls", err)
	}
}

// A revocation by OAuth subject denies the held calls of that subject, of
// the issuer it names or of any, and of no other subject.
func TestDenyCallsOfOAuthSubject(t *testing.T) {
	a, _ := two(t, askWrites)
	ctx := ctxT(t)
	held := map[string]model.HeldCall{}
	for _, p := range []string{"oauth:https://one.example#alice", "oauth:https://two.example#alice", "oauth:https://one.example#alice2", "key:alice"} {
		c := call(`{"p":1}`)
		c.Principal = p
		h, err := a.Hold(ctx, c, &askWrites.Rules[0])
		if err != nil {
			t.Fatal(err)
		}
		held[p] = h
	}
	if n, err := a.DenyCallsMatching(ctx, approvals.OAuthSubjectOf("https://one.example", "alice"), "gateway", "revoked"); err != nil || n != 1 {
		t.Fatalf("deny of one issuer's subject: %d %v, want 1", n, err)
	}
	if n, err := a.DenyCallsMatching(ctx, approvals.OAuthSubjectOf("", "alice"), "gateway", "revoked"); err != nil || n != 1 {
		t.Fatalf("deny of the subject of any issuer: %d %v, want 1 (the other issuer's)", n, err)
	}
	for p, want := range map[string]string{"oauth:https://one.example#alice": model.HeldDenied, "oauth:https://two.example#alice": model.HeldDenied,
		"oauth:https://one.example#alice2": model.HeldPending, "key:alice": model.HeldPending} {
		if h, err := a.Get(ctx, held[p].ID); err != nil || h.Decision != want {
			t.Errorf("%s's call: %+v %v, want %s", p, h, err, want)
		}
	}
}
