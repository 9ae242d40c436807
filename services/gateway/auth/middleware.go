package auth

import (
	"context"
	"log/slog"
	"net/http"
	"strings"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// Realm names the gateway in WWW-Authenticate challenges.
const Realm = "mcpbus"

// WriteError answers with the error contract {code,message,field}; status 0
// takes the code's HTTP status (the mapping of docs/design.md).
func WriteError(w http.ResponseWriter, status int, err error) {
	e := apierr.From(err)
	if status == 0 {
		status = e.Code.HTTPStatus()
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(e.JSON(), '\n'))
}

// ScopeAnyKey is what a route needs that every valid key may use, whatever
// its scopes: GET /api/v1/me, with which a client (the web console) checks
// its key. It is no scope a key can hold (keys get admin, call or chat).
const ScopeAnyKey = "any-key"

// ScopeForPath is the gateway's rule of which scope a path needs: /api/v1/me
// any valid key, /api/v1/tools/search call (a search of the tools /mcp/tools
// lists), /api/v1/tasks call (tool calls run as durable tasks), /api/v1/approvals any valid key
// (the approvals store admits admins and named approvers), the chat profiles admin (they hold API keys and tool
// policies), the rest of /api/v1/chat and the OpenAI-compatible /v1 chat, the
// rest of /api admin, /mcp and below call, everything else (health) none.
func ScopeForPath(p string) string {
	switch {
	case p == "/api/v1/me", p == "/api/v1/me/authorizations", strings.HasPrefix(p, "/api/v1/me/authorizations/"): // the caller's own, whatever its scope
		return ScopeAnyKey
	case p == "/api/v1/tools/search", p == "/api/v1/tasks" || strings.HasPrefix(p, "/api/v1/tasks/"):
		return ScopeCall
	case p == "/api/v1/approvals" || strings.HasPrefix(p, "/api/v1/approvals/"):
		return ScopeAnyKey // admins and the approvers rules name (the store checks)
	case p == "/api/v1/chat/profiles" || strings.HasPrefix(p, "/api/v1/chat/profiles/"):
		return ScopeAdmin
	case p == "/api/v1/chat" || strings.HasPrefix(p, "/api/v1/chat/"), strings.HasPrefix(p, "/v1/"):
		return ScopeChat
	case p == "/api" || strings.HasPrefix(p, "/api/"):
		return ScopeAdmin
	case p == "/mcp" || strings.HasPrefix(p, "/mcp/"):
		return ScopeCall
	}
	return ""
}

// MiddlewareOptions configure Middleware.
type MiddlewareOptions struct {
	// Store checks the keys. Required unless NoAuth.
	Store *KeyStore
	// NoAuth makes every request auth.Anonymous() (local experiments only).
	NoAuth bool
	// ScopeFor names the scope a request needs ("" = public); default ScopeForPath.
	ScopeFor func(*http.Request) string
	Logger   *slog.Logger
	// Failures, when set, throttles failed authentications
	// (NewFailureLimiter): each 401 takes a token of its bucket, and a bucket
	// with none left gets 429 RATE_LIMITED with Retry-After until it
	// refills. A key of a known id has a bucket per client address and key
	// id; everything else (no key, a malformed or unknown one, a bad access
	// token) one per client address (ClientAddr).
	Failures *Limiter
	// OnThrottle, when set, is told of each request refused by Failures (metrics).
	OnThrottle func(*http.Request)
	// Tokens, when set, checks the bearer tokens it Handles (OAuth access
	// tokens) in place of the key store, and every challenge names its
	// resource metadata.
	Tokens TokenVerifier
}

// TokenVerifier checks bearer tokens that are not API keys: the OAuth
// access tokens of configured authorization servers (jwtauth.Verifier).
type TokenVerifier interface {
	// Handles reports whether token is one for Verify (not an API key).
	Handles(token string) bool
	// Verify returns the token's principal, or an error of code
	// UNAUTHORIZED for a token that does not verify.
	Verify(ctx context.Context, token string) (*Principal, error)
	// MetadataURL is the RFC 9728 resource metadata URL, named by every
	// challenge (resource_metadata).
	MetadataURL() string
	// TokenScope names the token scope that grants a key scope.
	TokenScope(scope string) string
}

// Middleware authenticates bearer keys (and, with Tokens, OAuth access
// tokens) and puts the Principal in the request context. A missing,
// unknown or revoked key, or a token that does not verify, gets 401
// UNAUTHORIZED with a Bearer challenge; a valid key without the route's scope gets 403 (code
// UNAUTHORIZED: the contract has no FORBIDDEN; the message says which scope
// is missing), and so does an access token that gives no scope at all, on
// every route. With Failures set, what failed too often gets 429 (see
// MiddlewareOptions.Failures).
func Middleware(opts MiddlewareOptions) func(http.Handler) http.Handler {
	if opts.ScopeFor == nil {
		opts.ScopeFor = func(r *http.Request) string { return ScopeForPath(r.URL.Path) }
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	anonymous := Anonymous()
	var metadataURL string
	missing := "an API key is required: send Authorization: Bearer <key>"
	if opts.Tokens != nil {
		metadataURL = opts.Tokens.MetadataURL()
		missing = "an API key or an OAuth access token is required: send Authorization: Bearer <key or token>"
	}
	challenge := func(w http.ResponseWriter, errCode, scope string) { setChallenge(w, metadataURL, errCode, scope) }
	// needs is the token scope a 401 names for a route of scope (RFC 6750
	// §3; a SHOULD of the MCP authorization spec, 2025-11-25): an MCP
	// client asks for the challenge's scope, and only without one for
	// every scope the resource metadata lists, mcpbus:admin included. None
	// for API keys alone (no token to ask for) or a route any key may use.
	needs := func(scope string) string {
		if opts.Tokens == nil || scope == ScopeAnyKey {
			return ""
		}
		return opts.Tokens.TokenScope(scope)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			scope := opts.ScopeFor(r)
			if scope == "" {
				next.ServeHTTP(w, r)
				return
			}
			if opts.NoAuth {
				if n, ok := r.Context().Value(noteKey{}).(*Note); ok {
					n.KeyID = anonymous.KeyID
				}
				next.ServeHTTP(w, r.WithContext(WithPrincipal(r.Context(), anonymous)))
				return
			}
			addr := ClientAddr(r)
			token, hasToken := bearer(r)
			var p *Principal
			var err error
			if hasToken && opts.Tokens != nil && opts.Tokens.Handles(token) {
				// An access token is checked locally (signature, claims): a
				// valid one passes whatever its address did; only a failure
				// meets the address's throttle.
				p, err = opts.Tokens.Verify(r.Context(), token)
				if apierr.Of(err) == apierr.Unauthorized {
					if throttled(w, r, opts, bucketKey{key: addr}) {
						return
					}
					failed(opts, bucketKey{key: addr})
					challenge(w, "invalid_token", needs(scope))
				}
			} else {
				// An API key of a known id is throttled on its own (address, id)
				// bucket, so one client's failures from a shared address (a
				// proxy) hold back neither other keys nor other clients; the
				// rest (no key, malformed, unknown id) on the address's, and
				// refused before the key store is asked.
				bucket := bucketKey{key: addr}
				if id, _, ok := ParseKey(token); ok && opts.Store != nil && opts.Store.Knows(id) {
					bucket.sub = id
				}
				if bucket.sub != "" {
					// A known id's secret is checked first (in memory: a hash
					// and a constant-time compare; a 256-bit secret is not
					// guessed), so whoever knows the id (it is in logs and on
					// held calls) cannot lock its owner out from a shared
					// address: only failures meet the throttle.
					if p, err = opts.Store.Authenticate(r.Context(), token); apierr.Of(err) == apierr.Unauthorized {
						if throttled(w, r, opts, bucket) {
							return
						}
						failed(opts, bucket)
						challenge(w, "invalid_token", needs(scope))
					}
				} else if throttled(w, r, opts, bucket) {
					return
				}
				switch {
				case bucket.sub != "": // checked above
				case !hasToken:
					failed(opts, bucket)
					challenge(w, "", needs(scope))
					WriteError(w, 0, apierr.New(apierr.Unauthorized, missing))
					return
				default:
					p, err = opts.Store.Authenticate(r.Context(), token)
					if apierr.Of(err) == apierr.Unauthorized {
						failed(opts, bucket)
						challenge(w, "invalid_token", needs(scope))
					}
				}
			}
			if err != nil {
				if apierr.Of(err) != apierr.Unauthorized {
					opts.Logger.Warn("API key or access token check failed", "error", err)
				}
				WriteError(w, 0, err)
				return
			}
			if n, ok := r.Context().Value(noteKey{}).(*Note); ok {
				n.KeyID = p.KeyID
			}
			if scope == ScopeAnyKey && p.Issuer != "" && len(p.Scopes) == 0 {
				// A delegated token whose user granted mcpbus none of its
				// scopes (after the scope map) reaches nothing, not even the
				// routes any key may use: those still act as the user (their
				// upstream authorizations, approvals). An API key always has
				// a scope. The challenge names call's, the scope an MCP
				// client comes for.
				want := opts.Tokens.TokenScope(ScopeCall)
				challenge(w, "insufficient_scope", want)
				WriteError(w, http.StatusForbidden, apierr.Newf(apierr.Unauthorized, "this access token carries no mcpbus scope (admin, call or chat), so it reaches nothing here (ask its issuer for %s)", want))
				return
			}
			if scope != ScopeAnyKey && !p.Can(scope) && p.Issuer != "" {
				want := opts.Tokens.TokenScope(scope)
				challenge(w, "insufficient_scope", want)
				WriteError(w, http.StatusForbidden, apierr.Newf(apierr.Unauthorized, "this access token lacks the %s scope needed for %s (ask its issuer for %s)", scope, r.URL.Path, want))
				return
			}
			if scope != ScopeAnyKey && !p.Can(scope) {
				challenge(w, "insufficient_scope", scope)
				WriteError(w, http.StatusForbidden, apierr.Newf(apierr.Unauthorized, "this API key lacks the %s scope needed for %s", scope, r.URL.Path))
				return
			}
			next.ServeHTTP(w, r.WithContext(WithPrincipal(r.Context(), p)))
		})
	}
}

// throttled answers 429 when bucket (an address, or an address and key id)
// failed too often, and reports whether it did.
func throttled(w http.ResponseWriter, r *http.Request, opts MiddlewareOptions, bucket bucketKey) bool {
	if opts.Failures == nil {
		return false
	}
	ok, wait := opts.Failures.peek(bucket)
	if ok {
		return false
	}
	if opts.OnThrottle != nil {
		opts.OnThrottle(r)
	}
	secs := retryAfter(w, wait)
	what := "from this address"
	if bucket.sub != "" {
		what = "with this key from this address"
	}
	WriteError(w, 0, apierr.Newf(apierr.RateLimited, "too many failed authentications %s; retry in %ds", what, secs))
	return true
}

// failed counts one failed authentication against bucket.
func failed(opts MiddlewareOptions, bucket bucketKey) {
	if opts.Failures != nil {
		opts.Failures.allow(bucket, nil)
	}
}

// Note carries the id of the authenticated key out to the middleware around
// this one (the access log), which cannot see the inner request's context.
type Note struct{ KeyID string }

type noteKey struct{}

// WithNote returns ctx with an empty Note that Middleware fills in.
func WithNote(ctx context.Context) (context.Context, *Note) {
	n := &Note{}
	return context.WithValue(ctx, noteKey{}, n), n
}

// bearer reads the token of an Authorization: Bearer header.
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// setChallenge sets the RFC 6750 WWW-Authenticate header, naming the RFC
// 9728 resource metadata when there is one (MCP authorization).
func setChallenge(w http.ResponseWriter, metadataURL, errCode, scope string) {
	v := `Bearer realm="` + Realm + `"`
	if metadataURL != "" {
		v += `, resource_metadata="` + metadataURL + `"`
	}
	if errCode != "" {
		v += `, error="` + errCode + `"`
	}
	if scope != "" {
		v += `, scope="` + scope + `"`
	}
	w.Header().Set("WWW-Authenticate", v)
}
