// Package jwtauth makes the gateway an OAuth 2.1 protected resource: it
// verifies access tokens (JWT) of configured authorization servers against
// their JWK Sets, maps the tokens' scopes to the gateway's key scopes and
// tool filters, and describes the resource in RFC 9728 metadata.
package jwtauth

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Defaults of Options.
const (
	DefaultLeeway      = 30 * time.Second
	DefaultHTTPTimeout = 10 * time.Second
)

// Options configure a Verifier. With no Issuers, OAuth is off.
type Options struct {
	// Issuers are the trusted authorization servers: a token's iss must be
	// one of them, exactly. They are the authorization_servers of the
	// protected resource metadata.
	Issuers []string
	// Resource is the gateway's resource identifier: the public URL of its
	// MCP endpoint as clients reach it (https://mcp.example.com/mcp). It
	// names the metadata's URL and is the default audience. Required with
	// Issuers.
	Resource string
	// Audiences are the aud values accepted (default: Resource). A
	// trailing slash is ignored (oauthex.MatchesResource).
	Audiences []string
	// JWKSURL is the JWK Set of the one issuer, when its metadata does not
	// name one (or is not served); by default it is discovered from the
	// issuer's RFC 8414 / OpenID Connect metadata.
	JWKSURL string
	// ScopeMap maps token scopes to grants: "<scope>=<grant> [<grant>...]"
	// (see ParseScopeMap). The mcpbus:* scopes need no entry.
	ScopeMap []string
	// Leeway is the clock skew allowed on exp, nbf and iat (default 30s).
	Leeway time.Duration
	// HTTPTimeout bounds each fetch of metadata or keys (default 10s).
	HTTPTimeout time.Duration
	// HTTPClient fetches metadata and keys (default: one with HTTPTimeout).
	HTTPClient *http.Client
	Logger     *slog.Logger
	// Revoked refuses tokens revoked before their exp (the gateway's
	// Revocations); nil: none are.
	Revoked RevocationCheck
}

// RevocationCheck says whether a verified token was revoked since:
// UNAUTHORIZED with the reason, or nil.
type RevocationCheck interface {
	Check(jti, issuer, subject string, iat time.Time) error
}

// Enabled reports whether any issuer is configured.
func (o Options) Enabled() bool { return len(o.Issuers) > 0 }

// Validate checks the options (flag names in the messages are the gateway's).
func (o Options) Validate() error {
	if !o.Enabled() {
		if o.Resource != "" || len(o.Audiences) > 0 || o.JWKSURL != "" || len(o.ScopeMap) > 0 {
			return errors.New("--oauth-resource, --oauth-audience, --oauth-jwks-url and --oauth-scope-map need --oauth-issuer")
		}
		return nil
	}
	for _, iss := range o.Issuers {
		if err := checkURL("--oauth-issuer", iss); err != nil {
			return err
		}
	}
	if o.Resource == "" {
		return errors.New("--oauth-resource is required with --oauth-issuer: the public URL of the gateway's MCP endpoint (https://mcp.example.com/mcp), which tokens must name as their audience")
	}
	if err := checkURL("--oauth-resource", o.Resource); err != nil {
		return err
	}
	if o.JWKSURL != "" {
		if len(o.Issuers) != 1 {
			return errors.New("--oauth-jwks-url needs exactly one --oauth-issuer (with several, each issuer's metadata names its keys)")
		}
		if err := checkURL("--oauth-jwks-url", o.JWKSURL); err != nil {
			return err
		}
	}
	for _, a := range o.Audiences {
		if a == "" {
			return errors.New("--oauth-audience must not be empty")
		}
	}
	if o.Leeway < 0 || o.Leeway > 5*time.Minute {
		return fmt.Errorf("the token leeway %s must be between 0 and 5m", o.Leeway)
	}
	_, err := ParseScopeMap(o.ScopeMap)
	return err
}

// checkURL accepts an absolute https URL without credentials, query or
// fragment; http only on a loopback host (local development and tests).
func checkURL(flag, s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Errorf("%s %q is not a URL: %w", flag, s, err)
	case u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
		return fmt.Errorf("%s %q must be an absolute https:// URL", flag, s)
	case u.Scheme == "http" && !loopback(u.Hostname()):
		return fmt.Errorf("%s %q must use https (http only for localhost)", flag, s)
	case u.User != nil:
		return fmt.Errorf("%s must not hold credentials", flag)
	case u.RawQuery != "" || u.Fragment != "" || strings.ContainsAny(s, "?#"):
		return fmt.Errorf("%s %q must not have a query or fragment", flag, s)
	case strings.ContainsAny(s, "\"\\ \t\r\n"):
		// It goes into WWW-Authenticate as a quoted string.
		return fmt.Errorf("%s %q must not hold quotes, backslashes or spaces", flag, s)
	}
	return nil
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
