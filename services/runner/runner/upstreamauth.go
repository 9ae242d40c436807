package runner

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/oauth2"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// upstreamAuth is the go-sdk OAuthHandler of an HTTP upstream. With an OAuth
// token (from `mcpbus servers auth`), its token source puts the access token
// on every request and asks the credential service again (cred.resolve,
// which refreshes the token) before it expires. A 401 or 403 from the
// upstream is never answered by a flow here (the runner has no user to ask):
// it becomes UNAUTHORIZED "Authentication failed. Check your API key.", the
// same for static API keys and OAuth tokens.
type upstreamAuth struct {
	ts oauth2.TokenSource // nil: no OAuth token, requests go as configured
}

func (a upstreamAuth) TokenSource(context.Context) (oauth2.TokenSource, error) { return a.ts, nil }

func (a upstreamAuth) Authorize(_ context.Context, _ *http.Request, resp *http.Response) error {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	return authFailed(errors.New("upstream answered HTTP " + resp.Status))
}

// authFailed is the contract's error for credentials an upstream (or the
// OAuth token endpoint, on refresh) refused.
func authFailed(cause error) *apierr.Error {
	return apierr.Wrap(apierr.Unauthorized, model.MsgAuthFailed, cause)
}

// refusedCredentials finds an UNAUTHORIZED error in err's chain (the
// upstream or the token endpoint refused): the error to report, or nil.
func refusedCredentials(err error) *apierr.Error {
	var ae *apierr.Error
	if errors.As(err, &ae) && ae.Code == apierr.Unauthorized {
		if ae.Message == model.MsgAuthFailed {
			return ae
		}
		return authFailed(err)
	}
	return nil
}

// credTokenSource asks the credential service for the server's current
// access token (refreshed there when due).
type credTokenSource struct {
	r         *Runner
	id        string
	principal string // "": the server's own token
	timeout   time.Duration
	fetched   func(token string) // when not nil: told each token fetched (a session's redactor)
}

func (c credTokenSource) Token() (*oauth2.Token, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	var creds model.ResolvedCredentials
	var err error
	if res, ok := c.r.opts.Resolver.(PrincipalResolver); ok && c.principal != "" {
		creds, err = res.ResolveFor(ctx, c.id, c.principal)
	} else {
		creds, err = c.r.opts.Resolver.Resolve(ctx, c.id)
	}
	if err != nil {
		if e := refusedCredentials(err); e != nil {
			return nil, e
		}
		return nil, err
	}
	if creds.OAuth == nil || creds.OAuth.AccessToken == "" {
		return nil, authFailed(errors.New("no OAuth token is stored any more"))
	}
	if c.fetched != nil {
		c.fetched(creds.OAuth.AccessToken)
	}
	return oauthToken(creds.OAuth), nil
}

// tokenForURL refuses an OAuth token issued for another resource (RFC
// 8707) than cfg's transport.url: an admin who points a server elsewhere
// after its users authorized it must not receive their tokens there (nor
// the server's own); the server, or each user, authorizes again for the
// new URL. Nil without a token, or for one of unknown resource.
func (s *server) tokenForURL(cfg *model.McpConfig, o *model.ResolvedOAuth) error {
	if o == nil || o.AccessToken == "" || model.ResourceCovers(o.Resource, cfg.Transport.URL) {
		return nil
	}
	// Hosts only: a URL's path or query may hold a secret.
	s.log.Warn("not sending an OAuth token issued for another URL: authorize the server again", "token_host", hostOf(o.Resource), "url_host", hostOf(cfg.Transport.URL))
	return authFailed(errors.New("the OAuth token was issued for another URL than transport.url: authorize the server again"))
}

// hostOf is u's host ("" when it does not parse).
func hostOf(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return ""
	}
	return p.Host
}

func oauthToken(o *model.ResolvedOAuth) *oauth2.Token {
	return &oauth2.Token{AccessToken: o.AccessToken, TokenType: o.TokenType, Expiry: o.ExpiresAt}
}

// upstreamAuthFor builds the handler of an HTTP server: with an OAuth token
// that goes in the Authorization header, a token source renewed through the
// credential service EarlyRefresh before expiry; the header is then left
// out of the static ones (which would send the first token for ever).
func (r *Runner) upstreamAuthFor(cfg *model.McpConfig, o *model.ResolvedOAuth, headers map[string]string) (upstreamAuth, map[string]string) {
	if o == nil || !strings.EqualFold(o.Header, model.OAuthHeader) || r.opts.Resolver == nil {
		return upstreamAuth{}, headers
	}
	rest := withoutHeader(headers, model.OAuthHeader)
	src := credTokenSource{r: r, id: cfg.ID, timeout: r.opts.StartTimeout}
	return upstreamAuth{ts: oauth2.ReuseTokenSourceWithExpiry(oauthToken(o), src, r.opts.OAuthEarlyRefresh)}, rest
}
