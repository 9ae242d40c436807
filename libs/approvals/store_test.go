package approvals_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/approvals"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// two opens two stores (two gateway instances) on one bus, with rules.
func two(t *testing.T, rules model.ApprovalRules) (*approvals.Store, *approvals.Store) {
	t.Helper()
	ns := testkit.NATS(t)
	ctx := ctxT(t)
	a, err := approvals.Open(ctx, ctx, testkit.Connect(t, ns), approvals.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := approvals.Open(ctx, ctx, testkit.Connect(t, ns), approvals.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.PutRules(ctx, rules); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for b.Check("key:x", "fs__write").Decision != rules.Rules[0].Decision {
		if time.Now().After(deadline) {
			t.Fatal("the second instance never saw the rules")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return a, b
}

var askWrites = model.ApprovalRules{TimeoutSeconds: 2, Rules: []model.GatewayApprovalRule{
	{Tool: "fs__write", Decision: model.ApprovalAsk, Approvers: []string{"key:bob"}},
	{Tool: "fs__rm*", Principal: "key:*", Decision: model.ApprovalDeny},
}}

func call(args string) approvals.Call {
	return approvals.Call{Principal: "key:x", Server: "fs", Tool: "fs__write", Arguments: json.RawMessage(args)}
}

// A call held on one instance is listed and decided on the other; the
// approval binds the arguments' canonical form (key order does not matter,
// a value does); an approval releases one call; a late answer is CONFLICT.
func TestHeldCallAcrossInstances(t *testing.T) {
	a, b := two(t, askWrites)
	ctx := ctxT(t)
	if v := a.Check("key:x", "fs__rm_rf"); v.Decision != model.ApprovalDeny {
		t.Fatalf("rm = %+v", v)
	}
	if v := a.Check("key:x", "fs__read"); v.Decision != model.ApprovalAllow {
		t.Fatalf("read = %+v (no rule: allow)", v)
	}
	done := make(chan string, 1)
	go func() {
		msg, err := a.Enforce(ctx, call(`{"path":"/a","data":1}`), nil)
		if err != nil {
			msg = "error: " + err.Error()
		}
		done <- msg
	}()
	var held model.HeldCall
	for deadline := time.Now().Add(10 * time.Second); ; {
		list, err := b.List(ctx, "operator", true)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == 1 {
			held = list[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the held call was never listed on the other instance")
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, want := mustHash(t, `{"data":1,"path":"/a"}`)
	if held.ArgsSHA256 != want || held.Principal != "key:x" || held.Tool != "fs__write" {
		t.Fatalf("held = %+v, want args hash %s", held, want)
	}
	if l, _ := b.List(ctx, "key:eve", false); len(l) != 0 {
		t.Fatalf("a non-approver lists %v", l)
	}
	// Eve may not decide it, and is not told it exists: the same NOT_FOUND
	// as for a call never held (the id is computable from a guess).
	_, err := b.Decide(ctx, model.ApprovalDecideRequest{ID: held.ID, Decision: model.DecisionApprove}, "key:eve", false, false)
	_, none := b.Decide(ctx, model.ApprovalDecideRequest{ID: approvals.HeldID("key:x", "fs__write", "0"), Decision: model.DecisionApprove}, "key:eve", false, false)
	if apierr.Of(err) != apierr.NotFound || apierr.From(err).Message != strings.ReplaceAll(apierr.From(none).Message, approvals.HeldID("key:x", "fs__write", "0"), held.ID) {
		t.Fatalf("eve's approval = %v, want NOT_FOUND worded as for no call (%v)", err, none)
	}
	if _, err := b.Decide(ctx, model.ApprovalDecideRequest{ID: held.ID, Decision: model.DecisionApprove}, "key:bob", false, false); err != nil {
		t.Fatalf("bob (a named approver) approving: %v", err)
	}
	if msg := <-done; msg != "" {
		t.Fatalf("approved call refused: %s", msg)
	}
	_, err = b.Decide(ctx, model.ApprovalDecideRequest{ID: held.ID, Decision: model.DecisionDeny}, "operator", true, false)
	if apierr.Of(err) != apierr.Conflict {
		t.Fatalf("a second answer = %v, want CONFLICT", err)
	}
	// How it was decided is not eve's to learn either.
	_, err = b.Decide(ctx, model.ApprovalDecideRequest{ID: held.ID, Decision: model.DecisionDeny}, "key:eve", false, false)
	if apierr.Of(err) != apierr.NotFound || strings.Contains(err.Error(), model.HeldApproved) {
		t.Fatalf("eve's answer after the decision = %v, want NOT_FOUND", err)
	}
	// The approval was used: the same call again is held anew.
	h, err := a.Hold(ctx, call(`{"path":"/a","data":1}`), nil)
	if err != nil || h.Decision != model.HeldPending || h.ID != held.ID {
		t.Fatalf("same call again = %+v, %v", h, err)
	}
	// Another argument is another call.
	h2, _ := a.Hold(ctx, call(`{"path":"/b","data":1}`), nil)
	if h2.ID == held.ID {
		t.Fatal("a changed argument names the same held call")
	}
}

// Nobody answering denies the call at its expiry, and the record is gone.
func TestHeldCallTimesOut(t *testing.T) {
	a, _ := two(t, askWrites)
	ctx := ctxT(t)
	start := time.Now()
	msg, err := a.Enforce(ctx, call(`{}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if msg == "" || time.Since(start) < 2*time.Second {
		t.Fatalf("after %s: %q, want a denial after the 2 s timeout", time.Since(start), msg)
	}
	if l, _ := a.List(ctx, "operator", true); len(l) != 0 {
		t.Fatalf("still listed: %v", l)
	}
}

// The client's own answer decides its call.
func TestCallerAnswers(t *testing.T) {
	a, _ := two(t, askWrites)
	ctx := ctxT(t)
	msg, err := a.Enforce(ctx, call(`{"x":2}`), func(context.Context, model.HeldCall) (bool, error) { return false, nil })
	if err != nil || msg == "" {
		t.Fatalf("declined by the caller: %q, %v", msg, err)
	}
	msg, err = a.Enforce(ctx, call(`{"x":2}`), func(context.Context, model.HeldCall) (bool, error) { return true, nil })
	if err != nil || msg != "" {
		t.Fatalf("approved by the caller: %q, %v", msg, err)
	}
}

func mustHash(t *testing.T, s string) (json.RawMessage, string) {
	t.Helper()
	c, h, err := model.CanonicalArgs(json.RawMessage(s))
	if err != nil {
		t.Fatal(err)
	}
	return c, h
}

// A held call takes its timeout from the rules as stored, not from an
// instance's watch of them, which may lag a change: here the second
// instance no longer follows the rules at all.
func TestHoldTakesTheStoredTimeout(t *testing.T) {
	ns := testkit.NATS(t)
	ctx := ctxT(t)
	a, err := approvals.Open(ctx, ctx, testkit.Connect(t, ns), approvals.Options{})
	if err != nil {
		t.Fatal(err)
	}
	long := askWrites
	long.TimeoutSeconds = 600
	if _, err := a.PutRules(ctx, long); err != nil {
		t.Fatal(err)
	}
	follow, stop := context.WithCancel(ctx)
	b, err := approvals.Open(follow, ctx, testkit.Connect(t, ns), approvals.Options{})
	if err != nil {
		t.Fatal(err)
	}
	stop() // b keeps the 600 s rules it read
	if _, err := a.PutRules(ctx, askWrites); err != nil {
		t.Fatal(err)
	}
	if got := b.Rules().TimeoutSeconds; got != 600 {
		t.Fatalf("b's watched rules say %d s; the test needs them stale", got)
	}
	h, err := b.Hold(ctx, call(`{"n":1}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := h.ExpiresAt.Sub(h.CreatedAt); d != 2*time.Second {
		t.Fatalf("held for %s, want the stored rules' 2 s", d)
	}
}

// A front door leaves an approval the bus also asks for to the runner;
// when the request ends, what the runner did not consume (its watch of the
// rules behind: it let the call run without looking) is consumed, so one
// approval never releases two calls. A task's request ends before its call
// runs: its approval stays for the runner.
func TestApprovalLeftForTheBusIsSweptWhenTheRequestEnds(t *testing.T) {
	ctx := ctxT(t)
	front := frontDoor(t, askWrites)
	for _, deferred := range []bool{false, true} {
		args := fmt.Sprintf(`{"deferred":%v}`, deferred)
		c := call(args)
		c.Deferred = deferred
		reqCtx, endRequest := context.WithCancel(ctx)
		done := make(chan string, 1)
		go func() {
			msg, err := front.Enforce(reqCtx, c, nil)
			if err != nil {
				msg = err.Error()
			}
			done <- msg
		}()
		var h model.HeldCall
		testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
			l, _ := front.List(ctx, "operator", true)
			for _, x := range l {
				if string(x.Arguments) == args && x.Decision == model.HeldPending {
					h = x
					return true, ""
				}
			}
			return false, "the call is not held"
		})
		if _, err := front.Decide(ctx, model.ApprovalDecideRequest{ID: h.ID, Decision: model.DecisionApprove}, "operator", true, false); err != nil {
			t.Fatal(err)
		}
		if msg := <-done; msg != "" {
			t.Fatalf("deferred %v: approved call refused: %s", deferred, msg)
		}
		// Left for the runner while the request lasts.
		if got, err := front.Hold(ctx, c, nil); err != nil || got.Decision != model.HeldApproved {
			t.Fatalf("deferred %v: during the request the record is %+v, %v; want it approved, left for the runner", deferred, got, err)
		}
		endRequest()
		if deferred {
			time.Sleep(300 * time.Millisecond)
			if got, _ := front.Hold(ctx, c, nil); got.Decision != model.HeldApproved {
				t.Fatalf("a task's approval was consumed when its request ended: %+v", got)
			}
			continue
		}
		testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
			got, err := front.Hold(ctx, c, nil) // once consumed, the same call is held anew
			return err == nil && got.Decision == model.HeldPending, fmt.Sprintf("record %+v, %v", got, err)
		})
	}
}

// The approval round of a 2026-07-28 client and the chat take or await a
// held call themselves, under a context marked Sweeping: what they leave for
// the runner is consumed when that context ends, as Enforce's is.
func TestTakeAndAwaitSweepWhenMarked(t *testing.T) {
	ctx := ctxT(t)
	front := frontDoor(t, askWrites)
	for _, way := range []string{"take", "await", "take unmarked"} {
		c := call(fmt.Sprintf(`{"way":%q}`, way))
		h, err := front.Hold(ctx, c, nil)
		if err != nil {
			t.Fatal(err)
		}
		reqCtx, endRequest := context.WithCancel(ctx)
		if way != "take unmarked" {
			reqCtx = approvals.Sweeping(reqCtx)
		}
		got := make(chan model.HeldCall, 1)
		go func() {
			if way == "await" {
				h, err := front.Await(reqCtx, h)
				if err != nil {
					t.Error(err)
				}
				got <- h
			}
		}()
		if way == "await" {
			time.Sleep(100 * time.Millisecond) // awaiting before the decision
		}
		if _, err := front.Decide(ctx, model.ApprovalDecideRequest{ID: h.ID, Decision: model.DecisionApprove}, "operator", true, false); err != nil {
			t.Fatal(err)
		}
		var final model.HeldCall
		if way == "await" {
			final = <-got
		} else if final, err = front.Take(reqCtx, h); err != nil {
			t.Fatal(err)
		}
		if final.Decision != model.HeldApproved {
			t.Fatalf("%s: %+v, want approved", way, final)
		}
		if again, err := front.Hold(ctx, c, nil); err != nil || again.Decision != model.HeldApproved {
			t.Fatalf("%s: during the request the record is %+v, %v; want it approved, left for the runner", way, again, err)
		}
		endRequest()
		if way == "take unmarked" {
			time.Sleep(300 * time.Millisecond)
			if again, _ := front.Hold(ctx, c, nil); again.Decision != model.HeldApproved {
				t.Fatalf("an unmarked request's approval was consumed when it ended: %+v", again)
			}
			continue
		}
		testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
			again, err := front.Hold(ctx, c, nil) // once consumed, the same call is held anew
			return err == nil && again.Decision == model.HeldPending, fmt.Sprintf("%s: record %+v, %v", way, again, err)
		})
	}
}

// A rule may name a tool as its server does (fs__files.remove) where
// clients see it sanitised (fs__files_remove_<hash>): the call is held, its
// record keeps the server's name, and a front door checking the record
// again (release) sees the same rule, so it leaves the approval for the
// runner as it would under the listed name.
func TestRulesMatchTheServersToolName(t *testing.T) {
	ctx := ctxT(t)
	front := frontDoor(t, model.ApprovalRules{TimeoutSeconds: 5, Rules: []model.GatewayApprovalRule{
		{Tool: "fs__files.*", Decision: model.ApprovalAsk}}})
	c := approvals.Call{Principal: "key:x", Server: "fs", Tool: model.NamespacedName("fs", "files.remove"), ServerTool: "files.remove",
		Arguments: json.RawMessage(`{}`)}
	if v := front.Check(c.Principal, c.Tool); v.Decision != model.ApprovalAllow {
		t.Fatalf("the listed name alone: %s", v.Decision)
	}
	if v := front.Check(c.Principal, c.Names()...); v.Decision != model.ApprovalAsk {
		t.Fatalf("with the server's name: %s, want ask", v.Decision)
	}
	h, err := front.Hold(ctx, c, nil)
	if err != nil || h.ServerTool != "files.remove" {
		t.Fatalf("held %+v, %v; want the server's name kept", h, err)
	}
	if _, err := front.Decide(ctx, model.ApprovalDecideRequest{ID: h.ID, Decision: model.DecisionApprove}, "operator", true, false); err != nil {
		t.Fatal(err)
	}
	if got, err := front.Take(ctx, h); err != nil || got.Decision != model.HeldApproved {
		t.Fatalf("take: %+v, %v", got, err)
	}
	// Left for the runner: the rules ask for the record's names too.
	if again, err := front.Hold(ctx, c, nil); err != nil || again.Decision != model.HeldApproved {
		t.Fatalf("after the take the record is %+v, %v; want it approved, left for the runner", again, err)
	}
}

// frontDoor is a store as the gateway opens it (LeaveForBus) on a server of
// its own, with rules.
func frontDoor(t *testing.T, rules model.ApprovalRules) *approvals.Store {
	t.Helper()
	ctx := ctxT(t)
	front, err := approvals.Open(ctx, ctx, testkit.Connect(t, testkit.NATS(t)), approvals.Options{LeaveForBus: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := front.PutRules(ctx, rules); err != nil {
		t.Fatal(err)
	}
	return front
}

// One principal holds at most 100 calls anew an hour (each a record of up
// to 1 MiB that approvers read): the 101st is RATE_LIMITED; a retry of a
// held one is not new, and another principal is not held back.
func TestHeldCallsPerPrincipalBounded(t *testing.T) {
	a, _ := two(t, askWrites)
	ctx := ctxT(t)
	for i := range 100 {
		if _, err := a.Hold(ctx, call(fmt.Sprintf(`{"n":%d}`, i)), nil); err != nil {
			t.Fatalf("hold %d: %v", i, err)
		}
	}
	if _, err := a.Hold(ctx, call(`{"n":100}`), nil); apierr.Of(err) != apierr.RateLimited {
		t.Fatalf("the 101st: %v, want RATE_LIMITED", err)
	}
	if _, err := a.Hold(ctx, call(`{"n":7}`), nil); err != nil {
		t.Fatalf("a retry of a held call: %v", err)
	}
	other := call(`{"n":100}`)
	other.Principal = "key:y"
	if _, err := a.Hold(ctx, other, nil); err != nil {
		t.Fatalf("another principal: %v", err)
	}
}
