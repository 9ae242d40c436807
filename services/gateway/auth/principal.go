// Package auth is the gateway's API keys: hashed keys in KV, scopes, per-key
// tool filters, and the HTTP middleware that puts the caller's Principal in
// the request context.
package auth

import (
	"context"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
)

// Scopes of an API key.
const (
	// ScopeAdmin allows everything: the admin API, keys, and calls.
	ScopeAdmin = model.KeyScopeAdmin
	// ScopeCall allows listing and calling tools (/mcp, /mcp/tools, /mcp/invoke).
	ScopeCall = model.KeyScopeCall
	// ScopeChat allows the conversations (/api/v1/chat, /v1/chat/completions, /v1/models).
	ScopeChat = model.KeyScopeChat
)

// Principal is the authenticated caller of one request.
type Principal struct {
	KeyID  string   `json:"key_id"`
	Name   string   `json:"name"`
	Scopes []string `json:"scopes"`
	// Tools filters the namespaced tool names (<server>__<tool>) this key may
	// see and call: a filtered tool is invisible in lists and refused on call.
	Tools model.ToolFilter `json:"tools,omitzero"`
	// Rate overrides the gateway's default rate limit for this key.
	Rate *model.KeyRate `json:"rate,omitempty"`
	// ToolsMode "search" serves the key search_tools and call_tool instead
	// of every tool (model.KeyToolsModeSearch); PinnedTools are listed
	// beside them.
	ToolsMode   string   `json:"tools_mode,omitempty"`
	PinnedTools []string `json:"pinned_tools,omitempty"`
	// Issuer is the authorization server of an OAuth access token's
	// principal ("" for an API key).
	Issuer string `json:"issuer,omitempty"`
}

// Can reports whether the principal has scope (admin implies every scope).
func (p *Principal) Can(scope string) bool {
	return p != nil && (slices.Contains(p.Scopes, ScopeAdmin) || slices.Contains(p.Scopes, scope))
}

// SearchMode reports whether the principal's MCP views are search mode.
func (p *Principal) SearchMode() bool { return p != nil && p.ToolsMode == model.KeyToolsModeSearch }

// AllowsTool reports whether the principal may see and call a tool known by
// names (model.ToolNames: the namespaced name first; a filter naming the
// tool as its server does holds too).
func (p *Principal) AllowsTool(names ...string) bool {
	return p != nil && p.Tools.AllowsNames(names...)
}

const anonymousID = "anonymous"

// Anonymous is the principal of every request when auth is off (--no-auth).
func Anonymous() *Principal {
	return &Principal{KeyID: anonymousID, Name: "anonymous (auth off)", Scopes: []string{ScopeAdmin}}
}

// WithPrincipal returns ctx carrying p, which is also the bus principal of
// every request made with it (principal.From: the chat service reads it
// there); p names the request's span (enduser.id).
func WithPrincipal(ctx context.Context, p *Principal) context.Context {
	if p != nil && trace.SpanFromContext(ctx).IsRecording() {
		principal.Tag(ctx, p.Bus())
	}
	return principal.WithSource(ctx, p)
}

// BusPrincipal is p as the bus knows it (principal.Source).
func (p *Principal) BusPrincipal() (principal.Principal, bool) {
	if p == nil {
		return principal.Principal{}, false
	}
	return p.Bus(), true
}

// Bus is p as the bus knows it: an OAuth token's issuer and subject, or the
// key's id (never the key), with its admin scope and its tool filter.
func (p *Principal) Bus() principal.Principal {
	admin := slices.Contains(p.Scopes, ScopeAdmin)
	if p.Issuer != "" {
		return principal.OAuth(p.Issuer, strings.TrimPrefix(p.KeyID, OAuthKeyIDPrefix), admin, p.Tools)
	}
	return principal.Key(p.KeyID, admin, p.Tools)
}

// OAuthKeyIDPrefix starts the key id of an OAuth token's principal
// (jwtauth.KeyIDPrefix, which imports this package).
const OAuthKeyIDPrefix = "oauth:"

// PrincipalFrom returns the principal of a request context (nil when none).
func PrincipalFrom(ctx context.Context) *Principal {
	p, _ := principal.SourceFrom(ctx).(*Principal)
	return p
}
