package jwtauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"
	"unicode"

	"github.com/golang-jwt/jwt/v5"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
)

// KeyIDPrefix starts the key id of a token's principal: oauth:<subject>.
// Rate limits, the access log and MCP sessions go by it.
const KeyIDPrefix = auth.OAuthKeyIDPrefix

// maxSubject bounds the subject kept in a key id.
const maxSubject = 200

// signingMethods are the asymmetric JWS algorithms accepted: never none,
// never HMAC (the JWK Set is public).
var signingMethods = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// Verifier checks access tokens; it implements auth.TokenVerifier.
type Verifier struct {
	opts    Options
	scopes  ScopeMap
	issuers map[string]*keySet
	parser  *jwt.Parser
	meta    *oauthex.ProtectedResourceMetadata
	metaURL string
	paths   []string
}

// New returns the verifier of opts (nil, nil when no issuer is set). life
// bounds the JWK Sets' refreshes: cancel it when the gateway stops. No
// issuer is contacted until the first token comes.
func New(life context.Context, opts Options) (*Verifier, error) {
	if !opts.Enabled() {
		return nil, nil
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Leeway == 0 {
		opts.Leeway = DefaultLeeway
	}
	if opts.HTTPTimeout <= 0 {
		opts.HTTPTimeout = DefaultHTTPTimeout
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: opts.HTTPTimeout}
	}
	opts.HTTPClient = noDowngrade(opts.HTTPClient)
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if len(opts.Audiences) == 0 {
		opts.Audiences = []string{opts.Resource}
	}
	sm, err := ParseScopeMap(opts.ScopeMap)
	if err != nil {
		return nil, err
	}
	v := &Verifier{opts: opts, scopes: sm, issuers: map[string]*keySet{},
		parser: jwt.NewParser(jwt.WithValidMethods(signingMethods), jwt.WithLeeway(opts.Leeway),
			jwt.WithExpirationRequired(), jwt.WithIssuedAt())}
	for _, iss := range opts.Issuers {
		v.issuers[iss] = &keySet{issuer: iss, jwksURL: opts.JWKSURL, client: opts.HTTPClient,
			timeout: opts.HTTPTimeout, life: life, log: opts.Logger}
	}
	if err := v.buildMetadata(); err != nil {
		return nil, err
	}
	return v, nil
}

// claims are what the gateway reads of an access token (RFC 9068).
type claims struct {
	jwt.RegisteredClaims
	Scope string     `json:"scope"`
	Scp   scopeClaim `json:"scp"`
}

// scopeClaim is scp: a space-separated string or an array (Entra, Okta).
type scopeClaim []string

func (s *scopeClaim) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*s = strings.Fields(one)
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("scp is neither a string nor a list of strings")
	}
	*s = many
	return nil
}

// invalid is the 401 of a token that does not verify.
func invalid(format string, args ...any) error {
	return apierr.Newf(apierr.Unauthorized, "invalid access token: "+format, args...)
}

// Verify checks a token's signature against its issuer's keys, iss, aud,
// exp/nbf/iat (with the leeway), and returns its principal: key id
// oauth:<sub>, the key scopes and tool filter its scopes give. A token that
// does not verify gets UNAUTHORIZED; an issuer whose keys cannot be fetched
// SERVICE_UNAVAILABLE.
func (v *Verifier) Verify(ctx context.Context, token string) (*auth.Principal, error) {
	var c claims
	var keysErr error
	_, err := v.parser.ParseWithClaims(token, &c, func(t *jwt.Token) (any, error) {
		ks := v.issuers[c.Issuer]
		if ks == nil {
			return nil, errUntrusted
		}
		kf, err := ks.get(ctx)
		if err != nil {
			keysErr = err
			return nil, err
		}
		return kf.KeyfuncCtx(ctx)(t)
	})
	switch {
	case keysErr != nil:
		return nil, apierr.Wrap(apierr.ServiceUnavailable, "the access token cannot be checked now: "+keysErr.Error(), keysErr)
	case errors.Is(err, errUntrusted):
		return nil, invalid("its issuer %q is not trusted here", c.Issuer)
	case errors.Is(err, jwt.ErrTokenExpired):
		return nil, invalid("it has expired")
	case errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return nil, invalid("it is not valid yet")
	case errors.Is(err, jwt.ErrTokenMalformed):
		return nil, invalid("it is not a well-formed JWT")
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return nil, invalid("its signature does not verify")
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return nil, invalid("it is not signed by a key of its issuer (unknown kid or algorithm)")
	case err != nil:
		return nil, invalid("%v", err)
	}
	if !v.audienceOK(c.Audience) {
		return nil, invalid("it is not meant for this resource (aud %q; accepted: %s)", []string(c.Audience), strings.Join(v.opts.Audiences, ", "))
	}
	// The principal is the subject alone (RFC 9068 access tokens carry
	// one, client-credentials ones too): a client id in its place could
	// equal some user's subject and act as that user.
	subject := c.Subject
	if subject == "" || len(subject) > maxSubject || strings.IndexFunc(subject, unicode.IsControl) >= 0 {
		return nil, invalid("it names no usable subject (sub)")
	}
	if v.opts.Revoked != nil {
		var iat time.Time
		if c.IssuedAt != nil {
			iat = c.IssuedAt.Time
		}
		if err := v.opts.Revoked.Check(c.ID, c.Issuer, subject, iat); err != nil {
			return nil, err
		}
	}
	tokenScopes := append(strings.Fields(c.Scope), c.Scp...)
	scopes, tools := v.scopes.Apply(tokenScopes)
	return &auth.Principal{
		KeyID:  KeyIDPrefix + subject,
		Name:   subject + " (OAuth, " + c.Issuer + ")",
		Scopes: scopes,
		Tools:  model.ToolFilter{Allow: tools},
		Issuer: c.Issuer,
	}, nil
}

var errUntrusted = errors.New("untrusted issuer")

func (v *Verifier) audienceOK(aud []string) bool {
	for _, want := range v.opts.Audiences {
		if oauthex.MatchesResource(aud, want) {
			return true
		}
	}
	return false
}

// Handles reports whether token is one for Verify rather than an API key:
// a JWS compact serialisation (three dot-separated parts).
func (v *Verifier) Handles(token string) bool {
	return strings.Count(token, ".") == 2 && !strings.HasPrefix(token, auth.KeyPrefix)
}

// TokenScope names the token scope that grants a key scope (for the scope
// of an insufficient_scope challenge).
func (v *Verifier) TokenScope(scope string) string { return v.scopes.TokenScope(scope) }

// noDowngrade is a copy of hc that follows no redirect from https to
// another scheme: the issuer's metadata and keys decide which tokens are
// genuine, and what comes over plain http is whoever is on the way's.
func noDowngrade(hc *http.Client) *http.Client {
	c := *hc
	prev := hc.CheckRedirect
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if via[len(via)-1].URL.Scheme == "https" && req.URL.Scheme != "https" {
			return fmt.Errorf("refused: a redirect from https to %s (%s)", req.URL.Scheme, req.URL.Host)
		}
		if prev != nil {
			return prev(req, via)
		}
		if len(via) >= 10 { // Go's default
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	return &c
}
