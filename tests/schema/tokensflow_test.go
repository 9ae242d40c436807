package schema

import (
	"context"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/access"
	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/tools/mcpbus/stack"
)

// driveTokens drives mcp.v1.tokens.revoke as the CLI does (the operator's
// identity): a subject of one issuer revoked, and a request naming nothing
// refused (VALIDATION_ERROR).
func driveTokens(t *testing.T, ctx context.Context, sys *stack.Stack, subj bus.Subjects, bad deliberate) {
	t.Helper()
	nc, err := sys.ConnectAs("schema-operator", access.Operator)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var rv model.TokenRevocation
	req := model.TokenRevokeRequest{Sub: "schema-user", Iss: "https://login.example.com"}
	if err := bus.RequestJSON(ctx, nc, subj.Service("tokens", "revoke"), req, &rv, 10*time.Second); err != nil ||
		rv.Kind != model.RevokeSub || rv.Value != req.Sub || rv.Issuer != req.Iss {
		t.Fatalf("tokens.revoke: %+v, %v", rv, err)
	}
	bad.add("tokens.revoke", model.TokenRevokeRequest{})
	err = bus.RequestJSON(ctx, nc, subj.Service("tokens", "revoke"), model.TokenRevokeRequest{}, &rv, 10*time.Second)
	wantCode(t, "tokens.revoke of nothing", err, apierr.Validation)
}
