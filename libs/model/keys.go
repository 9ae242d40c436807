package model

import (
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// Wire types of the gateway's API keys (micro service mcpbus-gateway):
//
//	mcp.v1.keys.create  KeyCreateRequest → KeyCreateReply
//	mcp.v1.keys.list    KeyListRequest   → KeyListReply
//	mcp.v1.keys.revoke  KeyRevokeRequest → APIKey
//
// Only KeyCreateReply ever carries a key, once; the gateway stores a hash.

// Scopes of an API key.
const (
	// KeyScopeAdmin allows everything: the admin API (/api) and calls.
	KeyScopeAdmin = "admin"
	// KeyScopeCall allows listing and calling tools (/mcp, /mcp/tools, /mcp/invoke).
	KeyScopeCall = "call"
	// KeyScopeChat allows conversations with the chat profiles (/api/v1/chat,
	// /v1/chat/completions); the profile's tool filter decides the tools,
	// not the key's.
	KeyScopeChat = "chat"
)

// KeyToolsModeSearch is the tools_mode of a key whose /mcp (and
// serve-stdio) offers search_tools and call_tool instead of every tool,
// as ?tools=search does.
const KeyToolsModeSearch = "search"

// MaxKeyPinnedTools bounds a key's pinned_tools.
const MaxKeyPinnedTools = 64

// KeyRate overrides the default rate limit of one key (the gateway's) or
// agent (the runners').
type KeyRate struct {
	// RPS is the sustained rate in requests per second.
	RPS float64 `json:"rps"`
	// Burst is how many requests may come at once.
	Burst int `json:"burst"`
}

// Check refuses a rate out of bounds (fields rate.rps, rate.burst).
func (r KeyRate) Check() error {
	if r.RPS <= 0 || r.RPS > 100000 {
		return apierr.Invalid("rate.rps", "rate.rps must be above 0 and at most 100000")
	}
	if r.Burst < 1 || r.Burst > 1000000 {
		return apierr.Invalid("rate.burst", "rate.burst must be between 1 and 1000000")
	}
	return nil
}

// APIKey describes a key without its secret or hash.
type APIKey struct {
	ID     string   `json:"id"`
	Name   string   `json:"name"`
	Scopes []string `json:"scopes"`
	// Tools filters the namespaced tool names (<server>__<tool>) the key may
	// see and call.
	Tools ToolFilter `json:"tools,omitzero"`
	// ToolsMode is "" (every tool listed) or "search" (KeyToolsModeSearch).
	ToolsMode string `json:"tools_mode,omitempty"`
	// PinnedTools are namespaced tool names a search-mode key sees listed
	// beside search_tools and call_tool (when its filter allows them).
	PinnedTools []string  `json:"pinned_tools,omitempty"`
	Rate        *KeyRate  `json:"rate,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	RevokedAt   time.Time `json:"revoked_at,omitzero"`
}

// Revoked reports whether the key was revoked.
func (k APIKey) Revoked() bool { return !k.RevokedAt.IsZero() }

// KeyCreateRequest is the body of mcp.v1.keys.create.
type KeyCreateRequest struct {
	Name string `json:"name"`
	// Scopes are admin and/or call (default call).
	Scopes []string   `json:"scopes,omitempty"`
	Tools  ToolFilter `json:"tools,omitzero"`
	// ToolsMode and PinnedTools: see APIKey.
	ToolsMode   string   `json:"tools_mode,omitempty"`
	PinnedTools []string `json:"pinned_tools,omitempty"`
	Rate        *KeyRate `json:"rate,omitempty"`
}

// KeyCreateReply is the reply of mcp.v1.keys.create: Key is the full bearer
// token (mcpbus_<id>_<secret>), shown this once and never again.
type KeyCreateReply struct {
	Key string `json:"key"`
	APIKey
}

// KeyListRequest is the body of mcp.v1.keys.list.
type KeyListRequest struct {
	// IncludeRevoked lists revoked keys too.
	IncludeRevoked bool `json:"include_revoked,omitempty"`
}

// KeyListReply is the reply of mcp.v1.keys.list, by creation time.
type KeyListReply struct {
	Keys []APIKey `json:"keys"`
}

// KeyRevokeRequest is the body of mcp.v1.keys.revoke.
type KeyRevokeRequest struct {
	ID string `json:"id"`
}
