package model

import (
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// ServerAuth is how a remote server's calls authenticate upstream.
type ServerAuth struct {
	// PerPrincipal: every call carries the caller's own credentials (an
	// OAuth token from `mcpbus servers auth --principal`, or static
	// secrets from `mcpbus cred set --principal`), on an upstream session
	// of that principal alone. A caller without them is UNAUTHORIZED: no
	// call ever carries another principal's. The server's own credentials
	// (the operator's) serve its start (initialize, tools/list) and the
	// operator's calls.
	PerPrincipal bool `json:"per_principal,omitempty"`
}

var principalCredNamespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://mcpbus.dev/credentials/principals"))

// PrincipalCredentialID is the credential record (kind CredPrincipal) of
// principal's own credentials for the server with config id serverID: a
// version 5 uuid of both, so no other server or principal names it.
func PrincipalCredentialID(serverID, principal string) string {
	return uuid.NewSHA1(principalCredNamespace, []byte(serverID+"\n"+principal)).String()
}

// MsgNotAuthorized starts the UNAUTHORIZED answer to a caller of a
// per-principal server who has no credentials of their own for it yet; the
// gateway recognizes it to offer the authorization URL in the form the
// client declared (NotAuthorized).
const MsgNotAuthorized = "You have not authorized "

// NotAuthorized reports whether err is that answer.
func NotAuthorized(err error) bool {
	var e *apierr.Error
	return errors.As(err, &e) && e.Code == apierr.Unauthorized && strings.HasPrefix(e.Message, MsgNotAuthorized)
}

// PrincipalOperator is the principal of a request without one (the
// operator's CLI, a service of its own accord): on a per-principal server
// it uses the server's own credentials.
const PrincipalOperator = "operator"

// CheckPrincipalCredentials accepts what a per-principal session carries: a
// remote server's headers and an OAuth token; no environment or keyfiles.
func CheckPrincipalCredentials(c Credentials) *apierr.Error {
	switch {
	case len(c.Env) > 0 || len(c.Keyfiles) > 0:
		return apierr.Invalid("headers", "a principal's own credentials are headers (--header) or an OAuth token: a remote server has no environment")
	case len(c.Headers) == 0 && c.OAuth == nil:
		return apierr.Invalid("headers", "give the headers to send as this principal (e.g. {\"headers\":{\"X-Api-Key\":\"…\"}}), or authorize with OAuth")
	case len(c.Headers) > MaxPrincipalHeaders:
		return apierr.Invalid("headers", fmt.Sprintf("at most %d headers of your own per server", MaxPrincipalHeaders))
	}
	return nil
}

// MaxPrincipalHeaders bounds the headers one principal keeps for a server
// (any key may write its own).
const MaxPrincipalHeaders = 16

// PrincipalRecord is the credential record of principal's own credentials
// for cfg, or the error when cfg does not take them.
func PrincipalRecord(cfg *McpConfig, principal string) (id string, kind CredentialKind, err *apierr.Error) {
	if !cfg.Auth.PerPrincipal {
		return "", "", apierr.Invalid("auth.per_principal", cfg.Slug+" does not take per-principal credentials (auth.per_principal is off)")
	}
	return PrincipalCredentialID(cfg.ID, principal), CredPrincipal, nil
}
