package model

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Credentials are the secrets of one server, as the credential service keeps
// them (keyed by the server's config id). They never appear in a config, a
// status, an event or a log line.
type Credentials struct {
	// Env maps an environment variable of a stdio server to its secret value
	// (api_key auth; several variables, e.g. AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY).
	Env map[string]string `json:"env,omitempty"`
	// Headers maps an HTTP header of a remote server to its secret value.
	Headers map[string]string `json:"headers,omitempty"`
	// Keyfiles maps an environment variable to the path of a file holding its
	// value (keyfile auth): the path is stored, the file is read at spawn time.
	Keyfiles map[string]string `json:"keyfiles,omitempty"`
	// OAuth is an OAuth token, refreshed by the credential service when expired.
	OAuth *OAuthToken `json:"oauth,omitempty"`
	// Owner is, in a principal's own record (kind principal), the config id
	// of the server it is for. The credential service sets it from the
	// writer's request (CredSetRequest.For) or the resolve that names both,
	// and keeps it in the store only: no reply carries it. It lets the
	// server's delete find its principals' records (CredDeleteRequest.Principals),
	// whose ids are hashes.
	Owner string `json:"owner,omitempty"`
}

// Empty reports whether c holds nothing.
func (c Credentials) Empty() bool {
	return len(c.Env) == 0 && len(c.Headers) == 0 && len(c.Keyfiles) == 0 && c.OAuth == nil
}

// OAuthToken is a stored OAuth token plus what refreshing it needs, and where
// the access token goes when the server starts (an env var or a header).
type OAuthToken struct {
	AccessToken  string    `json:"access_token"`
	RefreshToken string    `json:"refresh_token,omitempty"`
	TokenType    string    `json:"token_type,omitempty"`
	ExpiresAt    time.Time `json:"expires_at,omitzero"`
	Scopes       []string  `json:"scopes,omitempty"`
	Provider     string    `json:"provider,omitempty"`
	TokenURL     string    `json:"token_url,omitempty"`
	ClientID     string    `json:"client_id,omitempty"`
	ClientSecret string    `json:"client_secret,omitempty"`
	// Resource is the resource indicator (RFC 8707) the token was issued
	// for: the MCP server's URL as its protected resource metadata names
	// it. A runner sends the token only to a server URL under it
	// (ResourceCovers), so a config whose transport.url changed after the
	// authorization does not carry it elsewhere. "": not known (a token set
	// by hand, or stored before resources were kept).
	Resource string `json:"resource,omitempty"`
	// EnvVar receives the access token (e.g. GITHUB_TOKEN); Header receives
	// "Bearer <token>" (e.g. Authorization). At least one is set.
	EnvVar string `json:"env_var,omitempty"`
	Header string `json:"header,omitempty"`
}

// CredSetRequest is the body of mcp.v1.cred.set: the given secrets are merged
// into the server's record (Replace: the record becomes exactly these).
//
// On the bus the secrets travel sealed: Sealed is the JSON of Credentials
// sealed (nkeys xkeys) to the credential service's public curve key
// (mcp.v1.cred.key) with a fresh sender key, SenderKey. The service refuses
// clear Credentials; in Go, fill Credentials and let credclient.Client.Set
// seal them (it sends Sealed, never Credentials).
type CredSetRequest struct {
	ServerID string `json:"server_id"`
	// Kind is whose record ServerID names (empty: a server's).
	Kind        CredentialKind `json:"kind,omitempty"`
	Credentials Credentials    `json:"credentials,omitzero"`
	Replace     bool           `json:"replace,omitempty"`
	// Sealed opens, with the credential service's key and SenderKey, to the
	// JSON of Credentials.
	Sealed    []byte `json:"sealed,omitempty"`
	SenderKey string `json:"sender_key,omitempty"`
	// Names, when given, must be exactly the names Sealed holds (the config
	// service passes on what the writer announced, so it cannot disagree
	// with what is stored).
	Names *SecretNames `json:"names,omitempty"`
	// DryRun opens and checks everything and writes nothing (the reply
	// describes the record as it would be).
	DryRun bool `json:"dry_run,omitempty"`
	// For names, on a principal's own record (kind principal), the server
	// and the principal it is for; ServerID must be their
	// PrincipalCredentialID. The record then goes with the server's delete.
	For *PrincipalOf `json:"for,omitempty"`
}

// PrincipalOf is whose principal record a CredSetRequest writes.
type PrincipalOf struct {
	ServerID  string `json:"server_id"`
	Principal string `json:"principal"`
}

// CredKeyRequest is the body of mcp.v1.cred.key ({}).
type CredKeyRequest struct{}

// CredKeyReply is the reply of mcp.v1.cred.key: the credential service's
// public curve key (nkeys xkey, "X…"). Every instance of the service shares
// it; writers seal secrets to it.
type CredKeyReply struct {
	PublicKey string `json:"public_key"`
}

// SecretNames lists the secrets a sealed message holds, names only: the
// config service needs them (required check, references), never the values.
type SecretNames struct {
	Env      []string `json:"env,omitempty"`
	Headers  []string `json:"headers,omitempty"`
	Keyfiles []string `json:"keyfiles,omitempty"`
	// OAuth is set when an OAuth token comes along: where it goes.
	OAuth *OAuthTarget `json:"oauth,omitempty"`
}

// OAuthTarget says where an OAuth access token goes (no value).
type OAuthTarget struct {
	EnvVar string `json:"env_var,omitempty"`
	Header string `json:"header,omitempty"`
}

// Empty reports whether n names nothing.
func (n SecretNames) Empty() bool {
	return len(n.Env) == 0 && len(n.Headers) == 0 && len(n.Keyfiles) == 0 && n.OAuth == nil
}

// Names lists what c holds, names only, each list sorted.
func (c Credentials) Names() SecretNames {
	keys := func(m map[string]string) []string {
		if len(m) == 0 {
			return nil
		}
		out := make([]string, 0, len(m))
		for k := range m {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	n := SecretNames{Env: keys(c.Env), Headers: keys(c.Headers), Keyfiles: keys(c.Keyfiles)}
	if c.OAuth != nil {
		n.OAuth = &OAuthTarget{EnvVar: c.OAuth.EnvVar, Header: c.OAuth.Header}
	}
	return n
}

// CredDeleteRequest is the body of mcp.v1.cred.delete: the named env vars,
// headers and keyfiles ("oauth" for the token) or, with no names, everything.
type CredDeleteRequest struct {
	ServerID string         `json:"server_id"`
	Kind     CredentialKind `json:"kind,omitempty"`
	Names    []string       `json:"names,omitempty"`
	// Principals, on a server's whole record (kind server, no names), also
	// removes every principal's own record for that server (the config
	// service's delete of a server sets it).
	Principals bool `json:"principals,omitempty"`
}

// CredForgetRequest is the body of mcp.v1.cred.forget: delete every
// per-principal record (kind principal) of Principal, whatever server it is
// for. mcpbus up's host asks it when it revokes an agent: an agent made
// again with the name is the same principal (agent:<name>), and must not
// call upstream as the revoked one did.
type CredForgetRequest struct {
	Principal string `json:"principal"`
}

// CredForgetReply answers mcp.v1.cred.forget: how many records went.
type CredForgetReply struct {
	Principal string `json:"principal"`
	Removed   int    `json:"removed"`
}

// CredDescribeRequest is the body of mcp.v1.cred.describe.
type CredDescribeRequest struct {
	ServerID string         `json:"server_id"`
	Kind     CredentialKind `json:"kind,omitempty"`
}

// CredDescription says which secrets a server has, never their values. It is
// the reply of set, delete and describe.
type CredDescription struct {
	ServerID string         `json:"server_id"`
	Kind     CredentialKind `json:"kind,omitempty"`
	Backend  string         `json:"backend"`
	Env      []string       `json:"env"`
	Headers  []string       `json:"headers"`
	Keyfiles []string       `json:"keyfiles"`
	// OAuth describes the token without its value.
	OAuth     *OAuthDescription `json:"oauth,omitempty"`
	UpdatedAt time.Time         `json:"updated_at,omitzero"`
}

// Has reports whether the described record holds the env var or header name.
func (d CredDescription) Has(name string) bool {
	for _, list := range [][]string{d.Env, d.Headers, d.Keyfiles} {
		for _, n := range list {
			if n == name {
				return true
			}
		}
	}
	return d.OAuth != nil && (d.OAuth.EnvVar == name || strings.EqualFold(d.OAuth.Header, name))
}

// OAuthDescription is an OAuth token without its secrets.
type OAuthDescription struct {
	Provider        string    `json:"provider,omitempty"`
	ExpiresAt       time.Time `json:"expires_at,omitzero"`
	HasRefreshToken bool      `json:"has_refresh_token"`
	Scopes          []string  `json:"scopes,omitempty"`
	EnvVar          string    `json:"env_var,omitempty"`
	Header          string    `json:"header,omitempty"`
}

// CredResolveRequest is the body of mcp.v1.cred.resolve, sent by runners only.
// RecipientKey is the runner's public curve key (nkeys xkey, "X…"): the reply
// is sealed to it, so secrets never cross the bus in clear text.
type CredResolveRequest struct {
	ServerID     string `json:"server_id"`
	RecipientKey string `json:"recipient_key"`
	// Runner is the id of the resolving runner: the credential service
	// answers only for servers that runner holds a lease on (mcp_owners).
	Runner string `json:"runner,omitempty"`
	// Principal, for a server with auth.per_principal, asks for that
	// principal's own record (PrincipalCredentialID) instead of the
	// server's: the caller's upstream token or secrets.
	Principal string `json:"principal,omitempty"`
	// RunnerKey, SignedAt and Signature prove the runner is the lease's
	// holder rather than anyone who says its id: a lease names its holder's
	// nkey (U…), and the holder signs ProofMessage with it. Runners without
	// a bus identity (an unauthenticated bus) leave them empty, and so do
	// their leases.
	RunnerKey string `json:"runner_key,omitempty"`
	// SignedAt is when, in Unix milliseconds.
	SignedAt int64 `json:"signed_at,omitempty"`
	// Signature is the nkey signature of ProofMessage, base64url without padding.
	Signature string `json:"signature,omitempty"`
}

// ProofMessage is what a runner signs to resolve a server's secrets: the
// server, the key the reply is sealed to, the runner and the time, so a
// signature opens nothing else and no other recipient's reply.
func (r CredResolveRequest) ProofMessage() []byte {
	msg := fmt.Appendf(nil, "mcpbus cred.resolve\n%s\n%s\n%s\n%d", r.ServerID, r.RecipientKey, r.Runner, r.SignedAt)
	if r.Principal != "" { // signed too, so a proof for one principal opens no other's record
		msg = fmt.Appendf(msg, "\n%s", r.Principal)
	}
	return msg
}

// CredEvent is the audit event of one resolve (mcp.v1.events.cred.<server_id>):
// who asked for which server's secrets, and the outcome; or of one change
// of a record (Type changed); never a value.
type CredEvent struct {
	Type     string `json:"type"` // resolved, refused or changed
	ServerID string `json:"server_id"`
	Runner   string `json:"runner,omitempty"`
	// Principal is whose own record a per-principal resolve asked for.
	Principal string `json:"principal,omitempty"`
	// Via is the subject verb: resolve (runners), registry (the registry service), chatkey (the chat service) or oauthclient (the gateway);
	// for a change set, delete or refresh (an OAuth token refreshed by the service).
	Via  string    `json:"via"`
	Code string    `json:"code,omitempty"`
	At   time.Time `json:"at"`
}

// Types of CredEvent. CredChanged says a record was written or removed
// (Via set, delete, or refresh for an OAuth token the service refreshed):
// runners fetch the fingerprint feed again on it.
const (
	CredResolved = "resolved"
	CredRefused  = "refused"
	CredChanged  = "changed"
)

// CredFingerprintsRequest is the body of mcp.v1.cred.fingerprints, which
// only runners may publish: the reply (SealedReply) is sealed to
// RecipientKey and opens to the JSON of FingerprintFeed.
type CredFingerprintsRequest struct {
	RecipientKey string `json:"recipient_key"`
	Runner       string `json:"runner,omitempty"`
}

// FingerprintFeed holds the keyed fingerprints of every stored secret value
// (libs/secretscan/fingerprint: HMAC-SHA256 under Key, truncated to 16
// bytes), never a value: runners block or redact them in tool calls.
type FingerprintFeed struct {
	// Alg is how the fingerprints are made (libs/secretscan/fingerprint.Alg):
	// a runner refuses a feed made another way.
	Alg string `json:"alg"`
	// Key is the fingerprint key, shared by the credential service's
	// instances and the runners it answers; it changes with the service's
	// curve key pair.
	Key []byte `json:"key"`
	// Sums are the fingerprints end to end, 16 bytes each.
	Sums []byte `json:"sums"`
	// Lengths are the distinct lengths of the fingerprinted texts.
	Lengths []int `json:"lengths"`
	// Records is how many stored records were read.
	Records int `json:"records"`
	// Truncated says the store held more than MaxFingerprints: the rest are
	// left out.
	Truncated bool      `json:"truncated,omitempty"`
	At        time.Time `json:"at"`
}

// MaxFingerprints bounds a feed (16 bytes each: 256 KiB, ~350 KiB as
// base64 before sealing), under NATS's default 1 MiB payload.
const MaxFingerprints = 16384

// SealedReply is the reply of mcp.v1.cred.resolve: Sealed opens, with the
// runner's curve key and SenderKey, to the JSON of ResolvedCredentials.
type SealedReply struct {
	SenderKey string `json:"sender_key"`
	Sealed    []byte `json:"sealed"`
}

// ResolvedCredentials are what a runner needs to start a server: env values
// and headers (an OAuth access token already placed in its env var or
// header, refreshed when it had expired) and keyfile paths to read.
type ResolvedCredentials struct {
	Env      map[string]string `json:"env,omitempty"`
	Headers  map[string]string `json:"headers,omitempty"`
	Keyfiles map[string]string `json:"keyfiles,omitempty"`
	// OAuth is the OAuth access token again with its expiry (it is also in
	// Env or Headers): an HTTP upstream's runner asks again before it expires.
	OAuth *ResolvedOAuth `json:"oauth,omitempty"`
}

// LooksSecret reports whether an env var or header name usually carries a
// secret (*_TOKEN, *_PAT, *_API_KEY, *_SECRET, passwords,
// Authorization). Imports and registry drafts use it to keep such values out
// of configs.
func LooksSecret(name string) bool {
	n := strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
	if n == "AUTHORIZATION" || n == "PROXY_AUTHORIZATION" || n == "COOKIE" || looksSecretWords(name) {
		return true
	}
	for _, s := range []string{"TOKEN", "_PAT_", "API_KEY", "APIKEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "PRIVATE_KEY", "ACCESS_KEY", "AUTH"} {
		if strings.Contains(n, s) {
			return true
		}
	}
	// _PAT only as a whole word: FILE_PATH is not a personal access token.
	return strings.HasSuffix(n, "_KEY") || strings.HasSuffix(n, "_PAT") || n == "PAT"
}
