package auth_test

import (
	"testing"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
)

func TestChatScope(t *testing.T) {
	for path, want := range map[string]string{
		"/api/v1/chat/conversations":           auth.ScopeChat,
		"/api/v1/chat/conversations/c1/events": auth.ScopeChat,
		"/v1/chat/completions":                 auth.ScopeChat,
		"/v1/models":                           auth.ScopeChat,
		"/api/v1/chat/profiles":                auth.ScopeAdmin,
		"/api/v1/chat/profiles/p1":             auth.ScopeAdmin,
		"/api/v1/chatter":                      auth.ScopeAdmin,
		"/api/v1/servers":                      auth.ScopeAdmin,
		"/mcp/tools":                           auth.ScopeCall,
		"/api/v1/tools/search":                 auth.ScopeCall,
		"/api/v1/tools/search/x":               auth.ScopeAdmin,
	} {
		if got := auth.ScopeForPath(path); got != want {
			t.Errorf("ScopeForPath(%s) = %q, want %q", path, got, want)
		}
	}
	s := startNATS(t).openStore(t)
	key, err := s.Create(ctx(t), model.KeyCreateRequest{Name: "chat app", Scopes: []string{"chat"}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Authenticate(ctx(t), key.Key)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Can(auth.ScopeChat) || p.Can(auth.ScopeCall) || p.Can(auth.ScopeAdmin) {
		t.Fatalf("a chat key's scopes: %v", p.Scopes)
	}
	if admin := (&auth.Principal{Scopes: []string{auth.ScopeAdmin}}); !admin.Can(auth.ScopeChat) {
		t.Fatal("admin does not imply chat")
	}
}
