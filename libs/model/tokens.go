package model

import "time"

// Revoking OAuth access tokens at the gateway before they expire
// (mcp.v1.tokens.revoke, served by the gateway; POST /api/v1/tokens/revoke).

// TokenRevokeRequest revokes the access token with this jti, or every
// access token of this subject (sub, else client_id) issued up to now.
// Exactly one is set.
type TokenRevokeRequest struct {
	JTI string `json:"jti,omitempty"`
	Sub string `json:"sub,omitempty"`
}

// Kinds of TokenRevocation.
const (
	RevokeJTI = "jti"
	RevokeSub = "sub"
)

// TokenRevocation is one entry of the revocation list (KV
// mcp_token_revocations): a jti refused outright, or a subject whose tokens
// issued at or before RevokedAt are refused. It is dropped once every token
// it covers has expired (the bucket's TTL, the longest token lifetime).
type TokenRevocation struct {
	Kind      string    `json:"kind"`
	Value     string    `json:"value"`
	RevokedAt time.Time `json:"revoked_at"`
	ExpiresAt time.Time `json:"expires_at"`
	By        string    `json:"by,omitempty"`
}
