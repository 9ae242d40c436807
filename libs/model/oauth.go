package model

import (
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// OAuth authorization of remote (Streamable HTTP) servers: the gateway runs
// the authorization-code flow (MCP authorization, 2025-11-25) and hands the
// tokens to the credential service; these are the messages around it.

// Fixed messages of the OAuth flow and of refused upstream credentials
// (the product's error table).
const (
	MsgAuthFailed       = "Authentication failed. Check your API key."
	MsgAuthorizeFailed  = "Authorization failed. Please try again."
	MsgAuthorizeTimeout = "Authorization timed out after 2 minutes."
)

// OAuthHeader is where an access token obtained by the gateway's flow goes:
// "Authorization: Bearer <token>" on every request to the upstream.
const OAuthHeader = "Authorization"

// TransportOAuth configures the OAuth client of a remote server when its
// authorization server does not allow dynamic client registration (RFC
// 7591): a client id registered beforehand, and the scopes to ask for
// (default: what the server's metadata names). No secret lives here: a
// confidential client's secret is a credential (OAuthClientCredentialID).
type TransportOAuth struct {
	ClientID string   `json:"client_id,omitempty"`
	Scopes   []string `json:"scopes,omitempty"`
}

var oauthClientNamespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://mcpbus.dev/oauth/clients"))

// OAuthClientCredentialID is the credential record (a uuid, as the
// credential service wants) holding the client secret of the confidential
// OAuth client (transport.oauth.client_id) of the server with config id
// serverID, under OAuthClientSecretName: a record of its own, so a runner
// resolving the server's credentials never gets it; only the gateway reads
// it (cred.oauthclient), for the token endpoint.
func OAuthClientCredentialID(serverID string) string {
	return uuid.NewSHA1(oauthClientNamespace, []byte(serverID)).String()
}

// OAuthClientSecretName is the name of the client secret in the record
// OAuthClientCredentialID.
const OAuthClientSecretName = "CLIENT_SECRET"

// OAuthRegisteredClientName is the name, in the record
// OAuthClientCredentialID, of the client mcpbus registered dynamically
// (RFC 7591) at the server's authorization server: its value is the JSON
// of OAuthRegisteredClient. The gateway registers once per server and
// issuer and reuses the client for every later flow, whoever starts it.
const OAuthRegisteredClientName = "REGISTERED_CLIENT"

// OAuthRegisteredClient is a client registered dynamically, as the
// gateway keeps it (OAuthRegisteredClientName): the authorization server
// (issuer) it was registered at, with which redirect URI (the gateway's
// callback), and what its registration response said.
type OAuthRegisteredClient struct {
	Issuer                  string `json:"issuer"`
	RedirectURI             string `json:"redirect_uri"`
	ClientID                string `json:"client_id"`
	ClientSecret            string `json:"client_secret,omitempty"`
	TokenEndpointAuthMethod string `json:"token_endpoint_auth_method,omitempty"`
}

// OAuthStartRequest is the body of mcp.v1.oauth.start (served by the
// gateway): start authorizing server (slug or id).
type OAuthStartRequest struct {
	Server string `json:"server"`
	// Principal, for a server with auth.per_principal: authorize for this
	// principal alone (their own token, kind principal). Empty: the
	// server's own authorization (the operator's).
	Principal string `json:"principal,omitempty"`
}

// OAuthStartReply is the reply of mcp.v1.oauth.start and of
// POST /api/v1/servers/{id}/auth: the URL to open in a browser, and when
// the flow gives up. The outcome comes as an OAuthEvent. A per-principal
// flow's URL is the console's page that continues it (its Flow), not the
// provider's: the browser must first prove it is the principal's
// (OAuthContinueReply).
type OAuthStartReply struct {
	Server           string    `json:"server"`
	Principal        string    `json:"principal,omitempty"`
	AuthorizationURL string    `json:"authorization_url"`
	Flow             string    `json:"flow,omitempty"`
	ExpiresAt        time.Time `json:"expires_at"`
}

// OAuthContinueRequest is the body of
// POST /api/v1/me/authorizations/{id}/continue: the flow (OAuthStartReply.Flow)
// the signed-in principal continues in this browser.
type OAuthContinueRequest struct {
	Flow string `json:"flow"`
}

// OAuthContinueReply is its answer: the provider's authorization URL, to
// open in the browser that got the reply's cookie (the callback requires
// it).
type OAuthContinueReply struct {
	Server           string    `json:"server"`
	AuthorizationURL string    `json:"authorization_url"`
	ExpiresAt        time.Time `json:"expires_at"`
}

// OAuthEvent is the outcome of one authorization flow
// (mcp.v1.events.oauth.<server>): authorized, or failed with the error.
type OAuthEvent struct {
	Type      string    `json:"type"`
	Server    string    `json:"server"`
	Principal string    `json:"principal,omitempty"` // a per-principal authorization's
	Code      string    `json:"code,omitempty"`
	Message   string    `json:"message,omitempty"`
	At        time.Time `json:"at"`
}

// Types of OAuthEvent.
const (
	OAuthAuthorized = "authorized"
	OAuthFailed     = "failed"
)

// ResolvedOAuth is an OAuth access token handed to a runner with its expiry,
// so that the runner asks again (and the credential service refreshes it)
// before it expires.
type ResolvedOAuth struct {
	AccessToken string    `json:"access_token"`
	TokenType   string    `json:"token_type,omitempty"`
	ExpiresAt   time.Time `json:"expires_at,omitzero"`
	Header      string    `json:"header,omitempty"`
	// Resource is OAuthToken.Resource.
	Resource string `json:"resource,omitempty"`
}

// ResourceCovers reports whether a token issued for resource (RFC 8707;
// OAuthToken.Resource) may be sent to the MCP server at target: same
// scheme, host and port, and target's path the resource's or below it. A
// token of unknown resource ("") is sent as before.
func ResourceCovers(resource, target string) bool {
	if resource == "" {
		return true
	}
	r, err := url.Parse(resource)
	if err != nil || r.Host == "" {
		return false
	}
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		return false
	}
	if !strings.EqualFold(r.Scheme, u.Scheme) || !strings.EqualFold(hostPort(r), hostPort(u)) {
		return false
	}
	rp := strings.TrimSuffix(r.EscapedPath(), "/")
	up := u.EscapedPath()
	return rp == "" || up == rp || strings.HasPrefix(up, rp+"/")
}

// hostPort is u's host with its scheme's default port made explicit.
func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		switch strings.ToLower(u.Scheme) {
		case "https":
			port = "443"
		case "http":
			port = "80"
		}
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// OAuthFlow is an OAuth flow waiting for its callback, as the gateway
// instance holding it publishes it (KV mcp_oauth_flows, key: the hex
// SHA-256 of the flow's state) so that any instance can pass the callback
// on: the server, the flow's own curve public key the callback is sealed
// to, and when the flow gives up.
type OAuthFlow struct {
	Server    string    `json:"server"`
	Key       string    `json:"key"`
	ExpiresAt time.Time `json:"expires_at"`
}

// OAuthCallbackRequest is the body of mcp.v1.oauth.callback.<flow>: the
// callback's query (OAuthCallback) sealed to the flow's key with a fresh
// sender key, since it holds the authorization code.
type OAuthCallbackRequest struct {
	Sealed    []byte `json:"sealed"`
	SenderKey string `json:"sender_key"`
}

// OAuthCallback is the plain text of OAuthCallbackRequest.Sealed: what the
// authorization server sent back to the redirect URI, with the browser's
// binding cookie (a per-principal flow's callback must carry the one its
// continue set). With Continue, it is instead a signed-in principal
// continuing the flow (Principal) in a browser given the cookie whose
// SHA-256 is Binding; State is then empty.
type OAuthCallback struct {
	Code      string `json:"code,omitempty"`
	State     string `json:"state,omitempty"`
	Iss       string `json:"iss,omitempty"`
	Error     string `json:"error,omitempty"`
	Cookie    string `json:"cookie,omitempty"`
	Continue  bool   `json:"continue,omitempty"`
	Principal string `json:"principal,omitempty"`
	Binding   string `json:"binding,omitempty"`
}

// OAuthCallbackReply is the success reply of mcp.v1.oauth.callback.<flow>:
// the server is authorized (its tokens are stored); to a continue, the
// provider's authorization URL.
type OAuthCallbackReply struct {
	Server           string `json:"server"`
	AuthorizationURL string `json:"authorization_url,omitempty"`
}

// RefuseServerID refuses a server id that is not a random (version 4) uuid.
// Credential records share one id space; those of chat profiles
// (ChatProfileCredentialID) and OAuth clients (OAuthClientCredentialID) are
// version 5, so a server given such an id would resolve, and on delete
// remove, another owner's secrets (issue 27).
func RefuseServerID(id string) *apierr.Error {
	u, err := uuid.Parse(id)
	if err != nil {
		return apierr.Invalid("id", "id must be a uuid (or left out)")
	}
	if u.Version() != 4 || u.Variant() != uuid.RFC4122 {
		return apierr.Invalid("id", "id must be a random (version 4) uuid: other versions name the credential records of chat profiles and OAuth clients")
	}
	return nil
}
