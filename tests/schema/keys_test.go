package schema

import (
	"crypto/rand"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
)

// TestKeysModelMatchesSchemas: the gateway's API key messages
// (libs/model/keys.go), as they marshal, match their schemas, and each
// schema rejects an unknown member. TestRealMessages checks what the
// gateway really sends; this covers every member of a key (tool filter,
// search mode, pinned tools, rate) and a revoked one.
func TestKeysModelMatchesSchemas(t *testing.T) {
	r := loadRegistry(t)
	at := time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)
	full := model.APIKey{ID: "0123456789abcdef", Name: "console", Scopes: []string{model.KeyScopeAdmin, model.KeyScopeCall, model.KeyScopeChat},
		Tools: model.ToolFilter{Allow: []string{"github__*"}, Deny: []string{"*__delete_*"}}, ToolsMode: model.KeyToolsModeSearch,
		PinnedTools: []string{"github__list_repos"}, Rate: &model.KeyRate{RPS: 2.5, Burst: 10}, CreatedAt: at}
	revoked := model.APIKey{ID: "fedcba9876543210", Name: "ci", Scopes: []string{model.KeyScopeCall}, CreatedAt: at, RevokedAt: at.Add(time.Hour)}
	docs := []modelDoc{
		{"key-create-request", model.KeyCreateRequest{Name: "ci"}},
		{"key-create-request", model.KeyCreateRequest{Name: "console", Scopes: full.Scopes, Tools: full.Tools, ToolsMode: full.ToolsMode,
			PinnedTools: full.PinnedTools, Rate: full.Rate}},
		{"key-create-reply", model.KeyCreateReply{Key: newKey(t, full.ID), APIKey: full}},
		{"key-list-request", model.KeyListRequest{}},
		{"key-list-request", model.KeyListRequest{IncludeRevoked: true}},
		{"key-list-reply", model.KeyListReply{Keys: []model.APIKey{full, revoked}}},
		{"key-list-reply", model.KeyListReply{Keys: []model.APIKey{}}},
		{"key-revoke-request", model.KeyRevokeRequest{ID: full.ID}},
		{"api-key", full},
		{"api-key", revoked},
	}
	checkModelDocs(t, r, docs)
	// A created key is never described by the schemas of the other replies.
	if r.validate("api-key", mustJSON(t, model.KeyCreateReply{Key: newKey(t, full.ID), APIKey: full})) == nil {
		t.Error("api-key accepts a key with its secret")
	}
}

// TestKeyPattern checks the key pattern of key-create-reply.json against
// the gateway's own parser (auth.ParseKey): a well-formed key matches both,
// and keys it refuses for their prefix, id or secret do not match.
func TestKeyPattern(t *testing.T) {
	r := loadRegistry(t)
	const id = "0123456789abcdef"
	check := func(key string, want bool) {
		t.Helper()
		if _, _, ok := auth.ParseKey(key); ok != want {
			t.Fatalf("auth.ParseKey says %q valid=%v, want %v", key, ok, want)
		}
		doc := mustJSON(t, model.KeyCreateReply{Key: key, APIKey: model.APIKey{ID: id, Name: "ci", Scopes: []string{"call"}, CreatedAt: time.Now().UTC()}})
		if err := r.validate("key-create-reply", doc); (err == nil) != want {
			t.Errorf("the schema says %q valid=%v, the gateway %v: %v", key, err == nil, want, err)
		}
	}
	for range 20 {
		key := newKey(t, id)
		check(key, true)
		check(key[:len(key)-1], false)
		check(key+"A", false)
		check(strings.Replace(key, auth.KeyPrefix, "mcpbux_", 1), false)
		check(strings.Replace(key, id, strings.ToUpper(id), 1), false)
		check(strings.Replace(key, id, id[:15], 1), false)
	}
}

// newKey makes a key of id as the gateway does: mcpbus_<id>_<32 random bytes, base64url>.
func newKey(t *testing.T, id string) string {
	t.Helper()
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		t.Fatal(err)
	}
	return auth.KeyPrefix + id + "_" + base64.RawURLEncoding.EncodeToString(secret)
}
