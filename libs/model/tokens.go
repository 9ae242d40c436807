package model

import "time"

// Revoking OAuth access tokens at the gateway before they expire
// (mcp.v1.tokens.revoke, served by the gateway; POST /api/v1/tokens/revoke).

// TokenRevokeRequest revokes the access token with this jti, or every
// access token of this subject (sub, else client_id, else azp) issued up to
// now: of the issuer Iss, or of every issuer when Iss is empty (two
// issuers may each have a user of one subject). JTI or Sub is set, not
// both; Iss only with Sub.
type TokenRevokeRequest struct {
	JTI string `json:"jti,omitempty"`
	Sub string `json:"sub,omitempty"`
	Iss string `json:"iss,omitempty"`
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
	Issuer    string    `json:"issuer,omitempty"` // a sub revocation's issuer; empty: every issuer
	RevokedAt time.Time `json:"revoked_at"`
	ExpiresAt time.Time `json:"expires_at"`
	By        string    `json:"by,omitempty"`
}
