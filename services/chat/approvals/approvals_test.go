package approvals_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	engine "github.com/mcpbus/mcpbus/libs/approvals"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/chat/approvals"
	"github.com/mcpbus/mcpbus/services/chat/loop"
)

var _ loop.Approver = (*approvals.Approver)(nil)

type env struct {
	asker, decider *approvals.Approver
}

func setup(t *testing.T, timeout time.Duration) env {
	t.Helper()
	ns := testkit.NATS(t)
	ctx := ctxT(t)
	a, err := approvals.Open(ctx, testkit.Connect(t, ns), approvals.Options{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	d, err := approvals.Open(ctx, testkit.Connect(t, ns), approvals.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return env{asker: a, decider: d}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func call(id, tool string) model.ChatToolCall {
	return model.ChatToolCall{CallID: id, Tool: tool, State: model.ToolCallAwaitingApproval, Arguments: json.RawMessage(`{"path":"/tmp"}`)}
}

type answer struct {
	decision string
	err      error
}

// ask runs Ask in the background and waits until the call is pending.
func ask(t *testing.T, e env, conv string, c model.ChatToolCall) <-chan answer {
	t.Helper()
	ch := make(chan answer, 1)
	// asked runs once the call is pending: a client told then finds it.
	listed := make(chan string, 1)
	asked := func() {
		p, err := e.decider.Pending(ctxT(t), conv)
		for _, pc := range p {
			if pc.CallID == c.CallID {
				listed <- ""
				return
			}
		}
		listed <- fmt.Sprintf("asked ran before the call was listed as pending (%+v, %v)", p, err)
	}
	go func() {
		d, err := e.asker.Ask(ctxT(t), conv, c, model.Tool{}, asked)
		ch <- answer{d, err}
	}()
	select {
	case msg := <-listed:
		if msg != "" {
			t.Fatal(msg)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("asked was not called within 30s")
	}
	return ch
}

func wait(t *testing.T, ch <-chan answer) answer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(30 * time.Second):
		t.Fatal("Ask did not return within 30s")
		return answer{}
	}
}

func TestApproveAndDeny(t *testing.T) {
	e := setup(t, 0)
	for _, dec := range []string{model.DecisionApprove, model.DecisionDeny} {
		c := call("call-"+dec, "fs__write file") // a space: the key encodes the id
		ch := ask(t, e, "conv1", c)
		p, err := e.decider.Pending(ctxT(t), "conv1")
		if err != nil || len(p) != 1 || p[0].Tool != c.Tool || string(p[0].Arguments) != `{"path":"/tmp"}` {
			t.Fatalf("pending %+v %v", p, err)
		}
		if err := e.decider.Decide(ctxT(t), model.ChatApproveRequest{Conversation: "conv1", CallID: c.CallID, Decision: dec}); err != nil {
			t.Fatal(err)
		}
		if a := wait(t, ch); a.err != nil || a.decision != dec {
			t.Fatalf("%s: got %+v", dec, a)
		}
		if p, err := e.decider.Pending(ctxT(t), "conv1"); err != nil || len(p) != 0 {
			t.Fatalf("still pending %+v %v", p, err)
		}
	}
}

func TestApproveConversation(t *testing.T) {
	e := setup(t, 0)
	ch := ask(t, e, "conv2", call("c1", "fs__delete"))
	if err := e.decider.Decide(ctxT(t), model.ChatApproveRequest{Conversation: "conv2", CallID: "c1", Decision: model.DecisionApproveConversation}); err != nil {
		t.Fatal(err)
	}
	if a := wait(t, ch); a.err != nil || a.decision != model.DecisionApproveConversation {
		t.Fatalf("got %+v", a)
	}
	// The same tool again: approved at once, nothing pending.
	d, err := e.asker.Ask(ctxT(t), "conv2", call("c2", "fs__delete"), model.Tool{}, nil)
	if err != nil || d != model.DecisionApprove {
		t.Fatalf("second ask %q %v", d, err)
	}
	if p, _ := e.decider.Pending(ctxT(t), "conv2"); len(p) != 0 {
		t.Fatalf("pending %+v", p)
	}
	// Another tool, or the same tool in another conversation, is asked for.
	for _, tc := range []struct{ conv, tool string }{{"conv2", "fs__write"}, {"conv3", "fs__delete"}} {
		ch := ask(t, e, tc.conv, call("c3", tc.tool))
		if err := e.decider.Decide(ctxT(t), model.ChatApproveRequest{Conversation: tc.conv, CallID: "c3", Decision: model.DecisionDeny}); err != nil {
			t.Fatal(err)
		}
		if a := wait(t, ch); a.decision != model.DecisionDeny {
			t.Fatalf("%+v: got %+v", tc, a)
		}
	}
	if err := e.decider.Forget(ctxT(t), "conv2"); err != nil {
		t.Fatal(err)
	}
	ch = ask(t, e, "conv2", call("c4", "fs__delete")) // the grant is gone
	_ = e.decider.Decide(ctxT(t), model.ChatApproveRequest{Conversation: "conv2", CallID: "c4", Decision: model.DecisionDeny})
	if a := wait(t, ch); a.decision != model.DecisionDeny {
		t.Fatalf("after Forget: %+v", a)
	}
}

func TestTimeoutDenies(t *testing.T) {
	e := setup(t, 300*time.Millisecond)
	start := time.Now()
	d, err := e.asker.Ask(ctxT(t), "conv4", call("slow", "fs__write"), model.Tool{}, nil)
	if d != model.DecisionDeny || !errors.Is(err, approvals.ErrTimedOut) {
		t.Fatalf("got %q %v", d, err)
	}
	if time.Since(start) > 30*time.Second { // far below DefaultTimeout
		t.Fatalf("took %s", time.Since(start))
	}
	if p, _ := e.decider.Pending(ctxT(t), "conv4"); len(p) != 0 {
		t.Fatalf("pending %+v", p)
	}
	// A late answer is told it was answered (by the timeout).
	err = e.decider.Decide(ctxT(t), model.ChatApproveRequest{Conversation: "conv4", CallID: "slow", Decision: model.DecisionApprove})
	if apierr.Of(err) != apierr.Conflict {
		t.Fatalf("late answer: %v", err)
	}
}

func TestCancel(t *testing.T) {
	e := setup(t, 0)
	ctx, cancel := context.WithCancel(ctxT(t))
	ch := make(chan answer, 1)
	go func() {
		d, err := e.asker.Ask(ctx, "conv5", call("x", "t"), model.Tool{}, nil)
		ch <- answer{d, err}
	}()
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
		p, _ := e.decider.Pending(ctxT(t), "conv5")
		return len(p) == 1, "not pending"
	})
	cancel()
	if a := wait(t, ch); !errors.Is(a.err, context.Canceled) {
		t.Fatalf("got %+v", a)
	}
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
		p, _ := e.decider.Pending(ctxT(t), "conv5")
		return len(p) == 0, "still pending"
	})
}

func TestDecideErrors(t *testing.T) {
	e := setup(t, 0)
	err := e.decider.Decide(ctxT(t), model.ChatApproveRequest{Conversation: "conv6", CallID: "nope", Decision: model.DecisionApprove})
	if apierr.Of(err) != apierr.NotFound {
		t.Fatalf("unknown call: %v", err)
	}
	for _, req := range []model.ChatApproveRequest{
		{Conversation: "conv6", CallID: "x", Decision: "maybe"},
		{Conversation: "a.b", CallID: "x", Decision: model.DecisionApprove},
		{Conversation: "conv6", CallID: "", Decision: model.DecisionApprove},
	} {
		if err := e.decider.Decide(ctxT(t), req); apierr.Of(err) != apierr.Validation {
			t.Fatalf("%+v: %v", req, err)
		}
	}
	if _, err := e.decider.Pending(ctxT(t), "a.>"); apierr.Of(err) != apierr.Validation {
		t.Fatalf("pending of a bad id: %v", err)
	}
}

func TestDoubleAnswer(t *testing.T) {
	e := setup(t, 0)
	// Sequential: the second answer, after Ask returned, is a CONFLICT.
	ch := ask(t, e, "conv7", call("d1", "t"))
	if err := e.decider.Decide(ctxT(t), model.ChatApproveRequest{Conversation: "conv7", CallID: "d1", Decision: model.DecisionDeny}); err != nil {
		t.Fatal(err)
	}
	if a := wait(t, ch); a.decision != model.DecisionDeny {
		t.Fatalf("got %+v", a)
	}
	err := e.decider.Decide(ctxT(t), model.ChatApproveRequest{Conversation: "conv7", CallID: "d1", Decision: model.DecisionApprove})
	if apierr.Of(err) != apierr.Conflict {
		t.Fatalf("second answer: %v", err)
	}

	// Racing: exactly one of many answers wins, the others are CONFLICT
	// (or NOT_FOUND would be wrong: the call existed).
	ch = ask(t, e, "conv7", call("d2", "t"))
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			dec := model.DecisionApprove
			if i%2 == 1 {
				dec = model.DecisionDeny
			}
			errs[i] = e.decider.Decide(ctxT(t), model.ChatApproveRequest{Conversation: "conv7", CallID: "d2", Decision: dec})
		})
	}
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won >= 0:
			t.Fatalf("answers %d and %d both won", won, i)
		case err == nil:
			won = i
		case apierr.Of(err) != apierr.Conflict:
			t.Fatalf("answer %d: %v", i, err)
		}
	}
	want := model.DecisionApprove
	if won%2 == 1 {
		want = model.DecisionDeny
	}
	if a := wait(t, ch); won < 0 || a.decision != want {
		t.Fatalf("won %d, asker got %+v", won, a)
	}
}

// A held chat call is the sender's: another principal (not an admin) cannot
// decide it, even where the chat's own check were passed; its sender can.
func TestOnlyTheSenderDecides(t *testing.T) {
	e := setup(t, 0)
	alice := principal.With(ctxT(t), principal.Key("alice", false, model.ToolFilter{}))
	bob := principal.With(ctxT(t), principal.Key("bob", false, model.ToolFilter{}))
	ch := make(chan answer, 1)
	go func() {
		d, err := e.asker.Ask(alice, "conv8", call("a1", "fs__write"), model.Tool{}, nil)
		ch <- answer{d, err}
	}()
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
		p, _ := e.decider.Pending(ctxT(t), "conv8")
		return len(p) == 1, "not pending"
	})
	req := model.ChatApproveRequest{Conversation: "conv8", CallID: "a1", Decision: model.DecisionApprove}
	if err := e.decider.Decide(bob, req); apierr.Of(err) != apierr.NotFound { // not his to know of
		t.Fatalf("bob deciding alice's call: %v", err)
	}
	if err := e.decider.Decide(alice, req); err != nil {
		t.Fatal(err)
	}
	if a := wait(t, ch); a.err != nil || a.decision != model.DecisionApprove {
		t.Fatalf("got %+v", a)
	}
}

// A chat's held call keeps the server's own name of its tool (a dotted name
// is listed sanitised): the engine's rules naming it match the record as
// they match the call at the runner.
func TestHeldCallKeepsTheServersToolName(t *testing.T) {
	ns := testkit.NATS(t)
	ctx := ctxT(t)
	a, err := approvals.Open(ctx, testkit.Connect(t, ns), approvals.Options{Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	held, err := engine.Open(ctx, ctx, testkit.Connect(t, ns), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	name := model.NamespacedName("fs", "files.remove")
	var got model.HeldCall
	var gerr error
	_, _ = a.Ask(ctx, "conv9", call("f1", name), model.Tool{Name: name, Server: "fs", Tool: "files.remove"}, func() {
		_, hash, err := model.CanonicalArgs(call("f1", name).Arguments)
		if err != nil {
			gerr = err
			return
		}
		got, gerr = held.Get(ctx, engine.HeldID(principal.Operator().ID, name, hash))
	})
	if gerr != nil || got.Server != "fs" || got.ServerTool != "files.remove" || got.Tool != name {
		t.Fatalf("held %+v, %v; want server fs, server_tool files.remove", got, gerr)
	}
}
