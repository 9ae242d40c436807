package model

import "github.com/google/uuid"

// CredentialKind says whose record a credential id names. Each kind has its
// own records in the credential service, so an id of one kind never reaches
// another kind's record: a server whose id equals a chat profile's derived id
// gets nothing of the profile's API key, and deleting it leaves the key.
type CredentialKind string

// The kinds of credential records. On the wire an empty kind is a server's.
const (
	CredServer      CredentialKind = "server"
	CredChatProfile CredentialKind = "chat_profile"
	CredOAuthClient CredentialKind = "oauth_client"
	CredRegistry    CredentialKind = "registry"
	// CredPrincipal records hold one principal's own upstream credentials
	// for a server with auth.per_principal (PrincipalCredentialID).
	CredPrincipal CredentialKind = "principal"
)

// CredentialKinds lists every kind, for validation and docs.
var CredentialKinds = []CredentialKind{CredServer, CredChatProfile, CredOAuthClient, CredRegistry, CredPrincipal}

// Or returns k, or CredServer when k is empty.
func (k CredentialKind) Or() CredentialKind {
	if k == "" {
		return CredServer
	}
	return k
}

// Valid reports whether k (after Or) is a known kind.
func (k CredentialKind) Valid() bool {
	for _, c := range CredentialKinds {
		if k.Or() == c {
			return true
		}
	}
	return false
}

// Derived reports whether ids of k are derived from a name (uuid v5: chat
// profiles, OAuth clients, the registries) rather than random (servers, v4).
func (k CredentialKind) Derived() bool { return k.Or() != CredServer }

// IsDerivedID reports whether id is a name-derived (version 5) uuid.
func IsDerivedID(id string) bool {
	u, err := uuid.Parse(id)
	return err == nil && u.Version() == 5
}
