package auth

import (
	"context"
	"testing"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
)

// TestBusPrincipal: a request's context carries the caller to the bus as
// its key id or its OAuth issuer and subject, with its admin scope and
// tool filter, never the key.
func TestBusPrincipal(t *testing.T) {
	key := &Principal{KeyID: "abc123", Name: "app", Scopes: []string{ScopeChat}, Tools: model.ToolFilter{Deny: []string{"*"}}}
	ctx := WithPrincipal(context.Background(), key)
	p, ok := principal.From(ctx)
	if !ok || p.ID != "key:abc123" || p.Kind != principal.KindKey || p.Admin || p.AllowsTool("tm__echo") {
		t.Fatalf("an API key's bus principal: %+v %v", p, ok)
	}
	tok := &Principal{KeyID: OAuthKeyIDPrefix + "alice", Scopes: []string{ScopeAdmin}, Issuer: "https://idp.example"}
	p, _ = principal.From(WithPrincipal(context.Background(), tok))
	if p.ID != "oauth:https://idp.example#alice" || p.Kind != principal.KindOAuth || !p.Admin || !p.AllowsTool("tm__echo") {
		t.Fatalf("an OAuth token's bus principal: %+v", p)
	}
}
