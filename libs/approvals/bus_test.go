package approvals_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/approvals"
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

// open opens a store on ns with the options given and rules put once.
func open(t *testing.T, ns *embednats.Server, opts approvals.Options) *approvals.Store {
	t.Helper()
	ctx := ctxT(t)
	s, err := approvals.Open(ctx, ctx, testkit.Connect(t, ns), opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func waitRules(t *testing.T, s *approvals.Store, want bool) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
		return s.Enforcing() == want, "the store never saw the rules"
	})
}

// A call on the bus (the runner's Gate): held past the caller's deadline it
// is refused naming the held call, which stays; once approved the retry
// runs, once (the approval is used); a changed argument is another call; a
// denial and the timeout refuse it; a deny rule refuses at once.
func TestGateOnTheBus(t *testing.T) {
	ns := testkit.NATS(t)
	runner := open(t, ns, approvals.Options{})
	if runner.Enforcing() {
		t.Fatal("no rules, yet the store enforces: the bus path would pay for nothing")
	}
	ctx := ctxT(t)
	if err := runner.Gate(ctx, call(`{}`), time.Second); err != nil {
		t.Fatalf("no rules: %v", err)
	}
	admin := open(t, ns, approvals.Options{})
	rules := askWrites
	rules.TimeoutSeconds = 6 // room for the steps below before the records expire
	if _, err := admin.PutRules(ctx, rules); err != nil {
		t.Fatal(err)
	}
	waitRules(t, runner, true)

	err := runner.Gate(ctx, call(`{"path":"/a"}`), 300*time.Millisecond)
	e := apierr.From(err)
	if e.Code != apierr.Unauthorized || e.Field != approvals.FieldApproval {
		t.Fatalf("held past the deadline: %v", err)
	}
	list, _ := admin.List(ctx, "operator", true)
	if len(list) != 1 || !strings.Contains(e.Message, list[0].ID) {
		t.Fatalf("the error %q does not name the held call %+v", e.Message, list)
	}
	id := list[0].ID
	// Another argument is another call, with its own record.
	if err := runner.Gate(ctx, call(`{"path":"/b"}`), 100*time.Millisecond); err == nil || strings.Contains(err.Error(), id) {
		t.Fatalf("a changed argument: %v", err)
	}
	if _, err := admin.Decide(ctx, model.ApprovalDecideRequest{ID: id, Decision: model.DecisionApprove}, "operator", true, false); err != nil {
		t.Fatal(err)
	}
	if err := runner.Gate(ctx, call(`{"path":"/a"}`), time.Second); err != nil {
		t.Fatalf("the retry after the approval: %v", err)
	}
	if err := runner.Gate(ctx, call(`{"path":"/a"}`), 100*time.Millisecond); apierr.From(err).Field != approvals.FieldApproval {
		t.Fatalf("a second run of one approval: %v", err)
	}

	// Denied while the caller waits.
	done := make(chan error, 1)
	go func() { done <- runner.Gate(ctx, call(`{"path":"/c"}`), 20*time.Second) }()
	h := waitHeld(t, admin, `{"path":"/c"}`)
	if _, err := admin.Decide(ctx, model.ApprovalDecideRequest{ID: h.ID, Decision: model.DecisionDeny, Reason: "no"}, "operator", true, false); err != nil {
		t.Fatal(err)
	}
	if err := <-done; apierr.Of(err) != apierr.Unauthorized || !strings.Contains(err.Error(), "denied") {
		t.Fatalf("denied: %v", err)
	}
	// Nobody deciding: denied at the rules' timeout (6 s), not the caller's.
	start := time.Now()
	err = runner.Gate(ctx, call(`{"path":"/d"}`), 20*time.Second)
	if apierr.Of(err) != apierr.Unauthorized || !strings.Contains(err.Error(), "nobody approved") || time.Since(start) > 15*time.Second {
		t.Fatalf("after %s: %v", time.Since(start), err)
	}
	// A deny rule: refused at once.
	rm := approvals.Call{Principal: "key:x", Server: "fs", Tool: "fs__rm_rf", Arguments: []byte(`{}`)}
	// The runner refuses it: the message does not say the gateway did.
	if err := runner.Gate(ctx, rm, time.Second); err == nil || apierr.From(err).Message != "the approval rules deny calls of fs__rm_rf" {
		t.Fatalf("a deny rule: %v", err)
	}
}

// A front door (the gateway, the chat) leaves an approved call the bus holds
// too for the runner, which finds the record approved and consumes it (the
// call is not held twice); a call the bus does not hold is consumed by the
// front door itself (else its approval would outlive the call).
func TestFrontDoorLeavesTheApprovalToTheRunner(t *testing.T) {
	ns := testkit.NATS(t)
	front := open(t, ns, approvals.Options{LeaveForBus: true})
	runner := open(t, ns, approvals.Options{})
	ctx := ctxT(t)
	if _, err := front.PutRules(ctx, askWrites); err != nil {
		t.Fatal(err)
	}
	waitRules(t, runner, true)
	approveOnce := func(c approvals.Call) model.HeldCall {
		t.Helper()
		done := make(chan string, 1)
		go func() {
			msg, err := front.Enforce(ctx, c, func(context.Context, model.HeldCall) (bool, error) { return true, nil })
			if err != nil {
				msg = err.Error()
			}
			done <- msg
		}()
		if msg := <-done; msg != "" {
			t.Fatalf("approved at the front door: %s", msg)
		}
		_, hash := mustHash(t, string(c.Arguments))
		return model.HeldCall{ID: approvals.HeldID(c.Principal, c.Tool, hash)}
	}
	h := approveOnce(call(`{"k":1}`))
	if got, err := front.Get(ctx, h.ID); err != nil || got.Decision != model.HeldApproved {
		t.Fatalf("left for the runner: %+v %v", got, err)
	}
	if err := runner.Gate(ctx, call(`{"k":1}`), 100*time.Millisecond); err != nil {
		t.Fatalf("held twice: %v", err)
	}
	if _, err := front.Get(ctx, h.ID); apierr.Of(err) != apierr.NotFound {
		t.Fatalf("the runner did not use the approval: %v", err)
	}
	// fs__read is allowed on the bus: the front door (a chat profile
	// asking about it) consumes its own approval.
	read := approvals.Call{Principal: "key:x", Server: "fs", Tool: "fs__read", Arguments: []byte(`{}`)}
	hr, err := front.Hold(ctx, read, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := front.Decide(ctx, model.ApprovalDecideRequest{ID: hr.ID, Decision: model.DecisionApprove}, "operator", true, false); err != nil {
		t.Fatal(err)
	}
	if got, err := front.Await(ctx, hr); err != nil || got.Decision != model.HeldApproved {
		t.Fatalf("await: %+v %v", got, err)
	}
	if _, err := front.Get(ctx, hr.ID); apierr.Of(err) != apierr.NotFound {
		t.Fatalf("an approval nobody else uses was left: %v", err)
	}
}

// waitHeld waits until the call with args is pending.
func waitHeld(t *testing.T, s *approvals.Store, args string) model.HeldCall {
	t.Helper()
	_, hash := mustHash(t, args)
	var h model.HeldCall
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
		list, _ := s.List(ctxT(t), "operator", true)
		for _, c := range list {
			if c.ArgsSHA256 == hash {
				h = c
				return true, ""
			}
		}
		return false, "never held"
	})
	return h
}
