package model

import "time"

// Actions of a GatewayAuditEvent (the last token of its subject).
const (
	GatewayKeyCreated    = "key_created"
	GatewayKeyRevoked    = "key_revoked"
	GatewayTokensRevoked = "tokens_revoked"
	GatewayOAuthStarted  = "oauth_started"
	GatewayHeldDecided   = "approval_decided"
	GatewayRulesChanged  = "approval_rules_changed"
)

// GatewayAuditEvent is what the gateway publishes on
// events.gateway.<action> (and appends to its audit chain) when someone
// changes who may do what through it: an API key made or revoked, OAuth
// access tokens revoked, an authorization flow with a remote server
// started, a held call decided, the approval rules replaced. Principal is
// who did it; never a key, token or secret (a key by its id, a token by
// its jti or subject).
type GatewayAuditEvent struct {
	Action    string `json:"action"`
	Principal string `json:"principal"`
	// key_created, key_revoked: the key's id, name and scopes.
	KeyID   string   `json:"key_id,omitempty"`
	KeyName string   `json:"key_name,omitempty"`
	Scopes  []string `json:"scopes,omitempty"`
	// tokens_revoked: jti or sub, the value named, and a sub's issuer
	// (none: every issuer).
	RevokeKind   string `json:"revoke_kind,omitempty"`
	RevokeValue  string `json:"revoke_value,omitempty"`
	RevokeIssuer string `json:"revoke_issuer,omitempty"`
	// oauth_started: the server and whose credentials the flow is for
	// ("" for the server's own).
	Server string `json:"server,omitempty"`
	For    string `json:"for,omitempty"`
	// approval_decided: the held call, its tool and the decision, and the
	// reason given with it (an approver's, or why a call of a revoked key,
	// token or agent was denied).
	HeldID   string `json:"held_id,omitempty"`
	Tool     string `json:"tool,omitempty"`
	Decision string `json:"decision,omitempty"`
	Reason   string `json:"reason,omitempty"`
	// approval_rules_changed: how many rules, and the default.
	Rules   int       `json:"rules,omitempty"`
	Default string    `json:"default,omitempty"`
	At      time.Time `json:"at"`
}
