// Package oauthtest is a local OAuth 2.1 authorization server for tests,
// speaking the real protocols an MCP client meets: authorization server
// metadata (RFC 8414), dynamic client registration (RFC 7591), the
// authorization endpoint (which approves at once: the test is the user),
// the token endpoint with PKCE S256 (RFC 7636), resource indicators (RFC
// 8707) and refresh tokens. Tests can shorten token lifetimes, refuse
// refreshes, deny authorizations and turn registration off. Verifier checks
// the tokens it issued, for a protected MCP server (testmcp.ServeProtected).
package oauthtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// Options configure the server.
type Options struct {
	// TokenTTL is the lifetime of access tokens (default 1 h).
	TokenTTL time.Duration
	// NoRegistration leaves dynamic client registration out of the metadata
	// (clients must be registered beforehand: Clients).
	NoRegistration bool
	// Clients are clients registered beforehand: id → secret ("" for a
	// public client). A confidential client must authenticate at the token
	// endpoint with its secret (invalid_client otherwise).
	Clients map[string]string
	// AuthMethods are the token endpoint authentication methods advertised
	// (token_endpoint_auth_methods_supported) and accepted from confidential
	// clients (default client_secret_basic, client_secret_post and none); a
	// secret sent another way is invalid_client.
	AuthMethods []string
	// Scopes are the scopes the server supports.
	Scopes []string
	// Meta edits the metadata served (a test aims an endpoint elsewhere).
	Meta func(*oauthex.AuthServerMeta)
	// RegistrationDelay holds each registration this long before it is
	// answered (a test makes registrations of concurrent flows overlap).
	RegistrationDelay time.Duration
}

// Server is a running authorization server.
type Server struct {
	// URL is the issuer (the server's base URL).
	URL string
	srv *httptest.Server

	authMethods []string
	regDelay    time.Duration

	mu            sync.Mutex
	ttl           time.Duration
	refuseRefresh bool
	deny          bool
	clients       map[string]client
	codes         map[string]grant
	access        map[string]token
	refresh       map[string]grant
	refreshes     int
	registrations int
	authorized    []url.Values
	secretAuth    []string // how each accepted confidential client sent its secret
	misdirected   []string // tokens presented to a verifier of another resource
}

type client struct {
	secret    string
	redirects []string
	expired   bool // refused at the token endpoint (ExpireClients)
}

// grant is what an authorization code or a refresh token stands for.
type grant struct {
	clientID, redirect, challenge, resource, scope string
	user                                           string
	expires                                        time.Time
}

type token struct {
	user     string
	resource string
	scopes   []string
	expires  time.Time
}

// Start runs a server until the test ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.TokenTTL <= 0 {
		opts.TokenTTL = time.Hour
	}
	if len(opts.AuthMethods) == 0 {
		opts.AuthMethods = []string{"client_secret_basic", "client_secret_post", "none"}
	}
	s := &Server{ttl: opts.TokenTTL, authMethods: opts.AuthMethods, regDelay: opts.RegistrationDelay, clients: map[string]client{}, codes: map[string]grant{},
		access: map[string]token{}, refresh: map[string]grant{}}
	for id, secret := range opts.Clients {
		s.clients[id] = client{secret: secret}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		meta := oauthex.AuthServerMeta{
			Issuer: s.URL, AuthorizationEndpoint: s.URL + "/authorize", TokenEndpoint: s.URL + "/token",
			ResponseTypesSupported:            []string{"code"},
			GrantTypesSupported:               []string{"authorization_code", "refresh_token"},
			TokenEndpointAuthMethodsSupported: opts.AuthMethods,
			CodeChallengeMethodsSupported:     []string{"S256"},
			ScopesSupported:                   opts.Scopes,
		}
		if !opts.NoRegistration {
			meta.RegistrationEndpoint = s.URL + "/register"
		}
		if opts.Meta != nil {
			opts.Meta(&meta)
		}
		writeJSON(w, http.StatusOK, meta)
	})
	if !opts.NoRegistration {
		mux.HandleFunc("POST /register", s.register)
	}
	mux.HandleFunc("GET /authorize", s.authorize)
	mux.HandleFunc("POST /token", s.token)
	s.srv = httptest.NewServer(mux)
	s.URL = s.srv.URL
	t.Cleanup(s.srv.Close)
	return s
}

// SetTokenTTL changes the lifetime of the access tokens issued from now on.
func (s *Server) SetTokenTTL(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ttl = d
}

// RefuseRefresh makes the token endpoint refuse refresh tokens
// (invalid_grant) while on.
func (s *Server) RefuseRefresh(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuseRefresh = on
}

// Deny makes the authorization endpoint answer access_denied while on.
func (s *Server) Deny(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deny = on
}

// ExpireClients makes the token endpoint refuse (invalid_client) every
// client registered so far, as an authorization server does with a client
// whose registration it no longer honours; the clients registered after
// are accepted.
func (s *Server) ExpireClients() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, c := range s.clients {
		c.expired = true
		s.clients[id] = c
	}
}

// Refreshes counts the refresh grants answered with a token.
func (s *Server) Refreshes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refreshes
}

// Registrations counts the clients registered dynamically.
func (s *Server) Registrations() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.registrations
}

// Authorizations returns the query of every authorization request approved.
func (s *Server) Authorizations() []url.Values {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.authorized)
}

// SecretAuth lists, for each token request of a confidential client that
// was accepted, its grant type and how it sent its secret
// ("authorization_code client_secret_post").
func (s *Server) SecretAuth() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.secretAuth)
}

// Misdirected lists the tokens this server issued that were presented to
// a Verifier of another resource than theirs ("<user>'s token for <r1>
// presented to <r2>"): a client that sent a token where it does not belong.
func (s *Server) Misdirected() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.misdirected)
}

// Verifier checks bearer tokens this server issued for resource (RFC 8707
// audience), for auth.RequireBearerToken.
func (s *Server) Verifier(resource string) auth.TokenVerifier {
	return func(_ context.Context, tok string, _ *http.Request) (*auth.TokenInfo, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		t, ok := s.access[tok]
		if !ok || !time.Now().Before(t.expires) {
			return nil, auth.ErrInvalidToken
		}
		if t.resource != resource {
			s.misdirected = append(s.misdirected, t.user+"'s token for "+t.resource+" presented to "+resource)
			return nil, fmt.Errorf("token for %q, not %q: %w", t.resource, resource, auth.ErrInvalidToken)
		}
		return &auth.TokenInfo{Scopes: t.scopes, Expiration: t.expires, UserID: t.user}, nil
	}
}

func (s *Server) register(w http.ResponseWriter, r *http.Request) {
	var meta oauthex.ClientRegistrationMetadata
	if err := json.NewDecoder(r.Body).Decode(&meta); err != nil || len(meta.RedirectURIs) == 0 {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_client_metadata"})
		return
	}
	time.Sleep(s.regDelay)
	id, secret := "client-"+rand.Text(), ""
	if meta.TokenEndpointAuthMethod != "none" {
		secret = rand.Text()
		if meta.TokenEndpointAuthMethod == "" {
			meta.TokenEndpointAuthMethod = "client_secret_basic"
		}
	}
	s.mu.Lock()
	s.clients[id] = client{secret: secret, redirects: meta.RedirectURIs}
	s.registrations++
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, &oauthex.ClientRegistrationResponse{ClientRegistrationMetadata: meta, ClientID: id, ClientSecret: secret})
}

// UserParam, added to an authorization URL by a test's "browser", names
// the user who approves (default user-<n>, the n-th approval); the tokens
// of that approval, and their refreshes, stand for that user
// (auth.TokenInfo.UserID).
const UserParam = "test_user"

// authorize approves at once (or denies, when told to) and redirects back
// with the code and the state.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.clients[q.Get("client_id")]
	redirect := q.Get("redirect_uri")
	switch {
	case !ok:
		http.Error(w, "unknown client", http.StatusBadRequest)
		return
	case redirect == "" || (len(c.redirects) > 0 && !slices.Contains(c.redirects, redirect)):
		http.Error(w, "redirect_uri not registered", http.StatusBadRequest)
		return
	}
	back, err := url.Parse(redirect)
	if err != nil {
		http.Error(w, "bad redirect_uri", http.StatusBadRequest)
		return
	}
	out := back.Query()
	out.Set("state", q.Get("state"))
	switch {
	case s.deny:
		out.Set("error", "access_denied")
	case q.Get("response_type") != "code" || q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("state") == "":
		out.Set("error", "invalid_request")
	default:
		code := rand.Text()
		user := q.Get(UserParam)
		if user == "" {
			user = fmt.Sprintf("user-%d", len(s.authorized)+1)
		}
		s.codes[code] = grant{clientID: q.Get("client_id"), redirect: redirect, challenge: q.Get("code_challenge"),
			resource: q.Get("resource"), scope: q.Get("scope"), user: user, expires: time.Now().Add(time.Minute)}
		s.authorized = append(s.authorized, q)
		out.Set("code", code)
	}
	back.RawQuery = out.Encode()
	http.Redirect(w, r, back.String(), http.StatusFound)
}

// token answers the authorization_code grant (checking the PKCE verifier,
// the redirect URI and the resource) and the refresh_token grant (checking
// the resource).
func (s *Server) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		tokenError(w, "invalid_request")
		return
	}
	id, secret, basic := r.BasicAuth()
	method := "client_secret_basic"
	if !basic {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
		method = "client_secret_post"
	} else {
		id, _ = url.QueryUnescape(id)
		secret, _ = url.QueryUnescape(secret)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.clients[id]
	if !ok || c.expired || c.secret != secret || (c.secret != "" && !slices.Contains(s.authMethods, method)) {
		tokenError(w, "invalid_client")
		return
	}
	if c.secret != "" {
		s.secretAuth = append(s.secretAuth, r.PostForm.Get("grant_type")+" "+method)
	}
	var g grant
	switch r.PostForm.Get("grant_type") {
	case "authorization_code":
		code := r.PostForm.Get("code")
		got, ok := s.codes[code]
		delete(s.codes, code) // single use
		sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
		switch {
		case !ok || got.clientID != id || !time.Now().Before(got.expires):
			tokenError(w, "invalid_grant")
			return
		case base64.RawURLEncoding.EncodeToString(sum[:]) != got.challenge:
			tokenError(w, "invalid_grant") // PKCE
			return
		case r.PostForm.Get("redirect_uri") != got.redirect:
			tokenError(w, "invalid_grant")
			return
		case r.PostForm.Get("resource") != "" && r.PostForm.Get("resource") != got.resource:
			tokenError(w, "invalid_target")
			return
		}
		g = got
	case "refresh_token":
		got, ok := s.refresh[r.PostForm.Get("refresh_token")]
		if !ok || got.clientID != id || s.refuseRefresh {
			tokenError(w, "invalid_grant")
			return
		}
		if r.PostForm.Get("resource") != "" && r.PostForm.Get("resource") != got.resource {
			tokenError(w, "invalid_target") // RFC 8707 §2.2
			return
		}
		delete(s.refresh, r.PostForm.Get("refresh_token")) // rotated
		g = got
		s.refreshes++
	default:
		tokenError(w, "unsupported_grant_type")
		return
	}
	access, refresh := "at-"+rand.Text(), "rt-"+rand.Text()
	s.access[access] = token{user: g.user, resource: g.resource, scopes: strings.Fields(g.scope), expires: time.Now().Add(s.ttl)}
	s.refresh[refresh] = g
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{"access_token": access, "token_type": "Bearer",
		"expires_in": int(s.ttl.Round(time.Second) / time.Second), "refresh_token": refresh, "scope": g.scope})
}

func tokenError(w http.ResponseWriter, code string) {
	status := http.StatusBadRequest
	if code == "invalid_client" {
		status = http.StatusUnauthorized
	}
	writeJSON(w, status, map[string]string{"error": code})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
