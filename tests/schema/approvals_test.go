package schema

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
)

// TestApprovalsModelMatchesSchemas: the gateway's approval messages
// (libs/model/approvals.go), as they marshal, match their schemas, each
// rejects an unknown member, and invalid values are refused.
func TestApprovalsModelMatchesSchemas(t *testing.T) {
	r := loadRegistry(t)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	canon, hash, err := model.CanonicalArgs(json.RawMessage(`{"path":"/tmp/x"}`))
	if err != nil {
		t.Fatal(err)
	}
	held := model.HeldCall{ID: "0123456789abcdef0123456789abcdef", Principal: "key:k1", Server: "fs", Tool: "fs__write",
		ArgsSHA256: hash, Arguments: canon, Approvers: []string{"key:bob"}, CreatedAt: at, ExpiresAt: at.Add(2 * time.Minute),
		Decision: model.HeldApproved, DecidedBy: "operator", DecidedAt: at.Add(time.Minute), Reason: "ok"}
	docs := []modelDoc{
		{"approval-rules", model.ApprovalRules{Default: model.ApprovalAllow, TimeoutSeconds: 60, Rules: []model.GatewayApprovalRule{
			{Tool: "fs__write", Principal: "key:*", Decision: model.ApprovalAsk, Approvers: []string{"key:bob"}}}}},
		{"approval-rules", model.ApprovalRules{}},
		{"held-call", held},
		{"held-call", model.HeldCall{ID: held.ID, Principal: "key:k1", Server: "fs", Tool: "fs__write", ArgsSHA256: hash,
			CreatedAt: at, ExpiresAt: at, Decision: model.HeldPending}},
		{"approvals-list-reply", model.ApprovalsListReply{Calls: []model.HeldCall{held}}},
		{"approvals-list-reply", model.ApprovalsListReply{Calls: []model.HeldCall{}}},
		{"approval-decide-request", model.ApprovalDecideRequest{ID: held.ID, Decision: model.DecisionDeny, Reason: "no"}},
	}
	checkModelDocs(t, r, docs)
	for _, bad := range []struct{ schema, doc string }{
		{"approval-rules", `{"rules":[{"tool":"x","decision":"maybe"}]}`},
		{"approval-rules", `{"timeout_seconds":99999}`},
		{"approval-decide-request", `{"id":"x","decision":"approve_conversation"}`},
		{"held-call", `{"id":"x"}`},
	} {
		if r.validate(bad.schema, []byte(bad.doc)) == nil {
			t.Errorf("%s accepts %s", bad.schema, bad.doc)
		}
	}
}
