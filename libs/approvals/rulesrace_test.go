package approvals_test

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/approvals"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/nats-io/nats.go/jetstream"
)

// Two admins change the rules at once through two gateway instances: both
// instances end up enforcing the rules the bucket holds. Before, an
// instance stored its own rules after its write was acknowledged, over
// whatever its watch had applied meanwhile: when the other instance's
// later write reached the watch first, the instance kept its own, older,
// rules until the next change, while every other instance enforced the
// newer ones.
func TestConcurrentRuleWritesConverge(t *testing.T) {
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
	js, err := jetstream.New(testkit.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, bus.BucketApprovalRules)
	if err != nil {
		t.Fatal(err)
	}
	rules := func(timeout int) model.ApprovalRules {
		r := askWrites
		r.TimeoutSeconds = timeout
		return r
	}
	for round := range 60 {
		var wg sync.WaitGroup
		for i, s := range []*approvals.Store{a, b} {
			wg.Go(func() {
				if _, err := s.PutRules(ctx, rules(10+2*round+i)); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		e, err := kv.Get(ctx, "policy")
		if err != nil {
			t.Fatal(err)
		}
		var stored model.ApprovalRules
		if err := json.Unmarshal(e.Value(), &stored); err != nil {
			t.Fatal(err)
		}
		for name, s := range map[string]*approvals.Store{"a": a, "b": b} {
			deadline := time.Now().Add(2 * time.Second)
			for s.Rules().TimeoutSeconds != stored.TimeoutSeconds {
				if time.Now().After(deadline) {
					t.Fatalf("round %d: instance %s enforces rules with timeout %d s; the bucket holds %d s",
						round, name, s.Rules().TimeoutSeconds, stored.TimeoutSeconds)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
}
