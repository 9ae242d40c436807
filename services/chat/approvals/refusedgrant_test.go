package approvals_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/chat/approvals"
)

// An approve_conversation that the engine refuses grants nothing. Decide
// wrote the grant before asking the engine, and left it when the engine
// refused (another principal's call; or one denied, expired or decided a
// moment before through another instance or `mcpbus approvals`): the
// answer was an error, yet every later call of the tool in the
// conversation was approved without asking.
func TestRefusedApproveConversationGrantsNothing(t *testing.T) {
	e := setup(t, 0)
	alice := principal.With(ctxT(t), principal.Key("alice", false, model.ToolFilter{}))
	bob := principal.With(ctxT(t), principal.Key("bob", false, model.ToolFilter{}))
	ch := make(chan answer, 1)
	go func() {
		d, err := e.asker.Ask(alice, "conv9", call("g1", "fs__delete"), model.Tool{}, nil)
		ch <- answer{d, err}
	}()
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
		p, _ := e.decider.Pending(ctxT(t), "conv9")
		return len(p) == 1, "not pending"
	})
	req := model.ChatApproveRequest{Conversation: "conv9", CallID: "g1", Decision: model.DecisionApproveConversation}
	if err := e.decider.Decide(bob, req); apierr.Of(err) != apierr.NotFound {
		t.Fatalf("bob deciding alice's call: %v", err)
	}
	deny := model.ChatApproveRequest{Conversation: "conv9", CallID: "g1", Decision: model.DecisionDeny}
	if err := e.decider.Decide(alice, deny); err != nil {
		t.Fatal(err)
	}
	if a := wait(t, ch); a.decision != model.DecisionDeny {
		t.Fatalf("got %+v", a)
	}
	// The next call of the tool is asked for, not approved by bob's refused grant.
	ch = make(chan answer, 1)
	go func() {
		d, err := e.asker.Ask(alice, "conv9", call("g2", "fs__delete"), model.Tool{}, nil)
		ch <- answer{d, err}
	}()
	select {
	case a := <-ch:
		t.Fatalf("the next call was answered without asking: %+v", a)
	case <-time.After(2 * time.Second):
	}
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
		p, _ := e.decider.Pending(ctxT(t), "conv9")
		return len(p) == 1, "not pending"
	})
	if err := e.decider.Decide(alice, model.ChatApproveRequest{Conversation: "conv9", CallID: "g2", Decision: model.DecisionDeny}); err != nil {
		t.Fatal(err)
	}
	if a := wait(t, ch); a.decision != model.DecisionDeny {
		t.Fatalf("got %+v", a)
	}
}

// Answers racing through two chat instances (approve_conversation against
// deny): the grant is in force exactly when an approve_conversation won.
func TestRacingAnswersGrantOnlyWhenApproveConversationWins(t *testing.T) {
	e := setup(t, 0)
	for round := range 6 {
		conv := fmt.Sprintf("race%d", round)
		ch := ask(t, e, conv, call("r1", "fs__delete"))
		const n = 6
		errs := make([]error, n)
		decisions := make([]string, n)
		var wg sync.WaitGroup
		for i := range n {
			decisions[i] = model.DecisionApproveConversation
			if (i+round)%2 == 1 {
				decisions[i] = model.DecisionDeny
			}
			deciders := []*approvals.Approver{e.decider, e.asker}
			wg.Go(func() {
				errs[i] = deciders[i%2].Decide(ctxT(t), model.ChatApproveRequest{Conversation: conv, CallID: "r1", Decision: decisions[i]})
			})
		}
		wg.Wait()
		won := ""
		for i, err := range errs {
			if err == nil {
				won = decisions[i]
			} else if apierr.Of(err) != apierr.Conflict {
				t.Fatalf("round %d: answer %d: %v", round, i, err)
			}
		}
		wait(t, ch)
		// The next call: approved at once if granted, else held until
		// the short deadline.
		actx, cancel := context.WithTimeout(ctxT(t), time.Second)
		d, err := e.asker.Ask(actx, conv, call("r2", "fs__delete"), model.Tool{}, nil)
		cancel()
		granted := err == nil && d == model.DecisionApprove
		if granted != (won == model.DecisionApproveConversation) {
			t.Fatalf("round %d: %s won, and the next call's answer is %q %v", round, won, d, err)
		}
	}
}
