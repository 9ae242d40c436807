package runner_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/approvals"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// A call of a withheld tool (its pinned definition changed) is refused at
// once, even under an ask rule: nobody is asked to approve a call that
// would be refused anyway. Before, the call was held for approval first.
func TestAskRuleOnAWithheldToolRefusesAtOnce(t *testing.T) {
	e, _ := pinEnv(t, model.PinStrict)
	waitEcho(t, e, func(_ model.Tool, ok bool) bool { return ok }, "before")
	rugPull(t, e)
	waitEcho(t, e, func(_ model.Tool, ok bool) bool { return !ok }, "after the change")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := putApprovalRules(t, ctx, e.NC,
		model.GatewayApprovalRule{Tool: "alpha__echo", Decision: model.ApprovalAsk},
		model.GatewayApprovalRule{Tool: "alpha__sleep", Decision: model.ApprovalDeny}) // tells when the runner has the rules
	subjects := bus.NewSubjects("")
	request := func(tool string) (*nats.Msg, error) {
		msg := nats.NewMsg(subjects.Call("alpha", model.ToolToken(tool)))
		msg.Data = []byte(`{"message":"hi"}`)
		msg.Header.Set(bus.HeaderTimeout, "4000") // a held call waits about this long
		return e.NC.RequestMsg(msg, 10*time.Second)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		reply, err := request("sleep")
		if err != nil {
			t.Fatal(err)
		}
		if e := bus.ReplyError(reply); e != nil && e.Field == approvals.FieldApproval {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the runner never applied the rules")
		}
	}

	start := time.Now()
	reply, err := request("echo")
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	var r callResult
	if e := bus.ReplyError(reply); e != nil || json.Unmarshal(reply.Data, &r) != nil || !r.IsError || len(r.Content) == 0 ||
		!strings.Contains(r.Content[0].Text, "changed since it was reviewed") {
		t.Fatalf("a call of the withheld tool under an ask rule: %s %v, want the withheld refusal", reply.Data, e)
	}
	if took > 2*time.Second {
		t.Errorf("the refusal took %s: the call was held for approval first", took)
	}
	held, err := store.List(ctx, "", true)
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != 0 {
		t.Errorf("held calls %+v: a call of a withheld tool was put up for approval", held)
	}
}
