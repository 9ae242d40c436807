package approvals_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/chat/approvals"
	"github.com/mcpbus/mcpbus/services/chat/loop"
)

var _ loop.InputAsker = (*approvals.Approver)(nil)

type inputAnswer struct {
	in      model.ChatInput
	content map[string]any
	err     error
}

// askInput runs AskInput in the background and waits until the input is pending.
func askInput(t *testing.T, a *approvals.Approver, ctx context.Context, conv, id string) <-chan inputAnswer {
	t.Helper()
	ch := make(chan inputAnswer, 1)
	asked := make(chan model.ChatInput, 1)
	in := model.ChatInput{InputID: id, CallID: "c1", Tool: "tm__ask", Server: "tm", Message: "Name?",
		RequestedSchema: json.RawMessage(`{"type":"object","required":["name"],"properties":{"name":{"type":"string","maxLength":5}}}`)}
	go func() {
		got, content, err := a.AskInput(ctx, conv, in, func(in model.ChatInput) { asked <- in })
		ch <- inputAnswer{got, content, err}
	}()
	select {
	case in := <-asked:
		if in.AskedAt.IsZero() || !in.ExpiresAt.After(in.AskedAt) {
			t.Fatalf("asked %+v", in)
		}
	case r := <-ch:
		t.Fatalf("AskInput returned before asking: %+v", r)
	}
	return ch
}

// An input waits in the bucket until answered from another instance; a
// misfit answer changes nothing; the timeout (or the call's deadline, less
// a margin) cancels it with a reason; Forget removes what waits.
func TestInputs(t *testing.T) {
	ns := testkit.NATS(t)
	ctx := ctxT(t)
	asker, err := approvals.Open(ctx, testkit.Connect(t, ns), approvals.Options{InputTimeout: 400 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	other, err := approvals.Open(ctx, testkit.Connect(t, ns), approvals.Options{})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("answered", func(t *testing.T) {
		long, err := approvals.Open(ctx, testkit.Connect(t, ns), approvals.Options{InputTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		ch := askInput(t, long, ctx, "conv", "i1")
		err = other.Answer(ctx, model.ChatAnswerRequest{Conversation: "conv", InputID: "i1", Action: model.InputAccept, Content: map[string]any{"name": "toolong"}})
		if e := apierr.From(err); e.Code != apierr.Validation || e.Field != "name" {
			t.Fatalf("a misfit answer: %v", err)
		}
		if p, err := other.PendingInputs(ctx, "conv"); err != nil || len(p) != 1 || p[0].InputID != "i1" || p[0].Action != "" {
			t.Fatalf("pending after a misfit answer: %+v %v", p, err)
		}
		if err := other.Answer(ctx, model.ChatAnswerRequest{Conversation: "conv", InputID: "i1", Action: model.InputAccept, Content: map[string]any{"name": "Ada"}}); err != nil {
			t.Fatal(err)
		}
		r := <-ch
		if r.err != nil || r.in.Action != model.InputAccept || r.content["name"] != "Ada" || r.in.Reason != "" {
			t.Fatalf("%+v", r)
		}
		err = other.Answer(ctx, model.ChatAnswerRequest{Conversation: "conv", InputID: "i1", Action: model.InputCancel})
		if apierr.Of(err) != apierr.Conflict {
			t.Fatalf("a late answer: %v", err)
		}
		// The answer's content does not stay in the bucket's history.
		js, err := jetstream.New(testkit.Connect(t, ns))
		if err != nil {
			t.Fatal(err)
		}
		kv, err := js.KeyValue(ctx, bus.BucketChatApprovals)
		if err != nil {
			t.Fatal(err)
		}
		hist, err := kv.History(ctx, approvals.InputKey("conv", "i1"))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range hist {
			if strings.Contains(string(e.Value()), "Ada") {
				t.Fatalf("revision %d keeps the answer: %s", e.Revision(), e.Value())
			}
		}
	})

	t.Run("timeout", func(t *testing.T) {
		r := <-askInput(t, asker, ctx, "conv", "i2")
		if r.err != nil || r.in.Action != model.InputCancel || !strings.Contains(r.in.Reason, "nobody answered") {
			t.Fatalf("%+v", r)
		}
		err := other.Answer(ctx, model.ChatAnswerRequest{Conversation: "conv", InputID: "i2", Action: model.InputDecline})
		if apierr.Of(err) != apierr.Conflict {
			t.Fatalf("an answer after the timeout: %v", err)
		}
	})

	t.Run("the call's deadline bounds the wait", func(t *testing.T) {
		long, err := approvals.Open(ctx, testkit.Connect(t, ns), approvals.Options{InputTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		call, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
		defer cancel()
		start := time.Now()
		r := <-askInput(t, long, call, "conv", "i3")
		// The input's own wait is the call's 1.5 s less the margin, and it
		// ends in cancel before the call's deadline (an error after it).
		// Timed by the record, not the wall clock: the bucket's writes
		// around the wait take their time on a loaded host.
		if r.err != nil || r.in.Action != model.InputCancel || r.in.ExpiresAt.Sub(r.in.AskedAt) > 500*time.Millisecond {
			t.Fatalf("%+v after %s", r, time.Since(start))
		}
	})

	t.Run("forget", func(t *testing.T) {
		long, err := approvals.Open(ctx, testkit.Connect(t, ns), approvals.Options{InputTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		ch := askInput(t, long, wctx, "gone", "i4")
		if err := other.Forget(ctx, "gone"); err != nil {
			t.Fatal(err)
		}
		if r := <-ch; r.err == nil {
			t.Fatalf("the input survived Forget: %+v", r)
		}
		cancel()
		if p, err := other.PendingInputs(ctx, "gone"); err != nil || len(p) != 0 {
			t.Fatalf("%+v %v", p, err)
		}
	})
}
