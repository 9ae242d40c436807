package credential

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nkeys"
	"golang.org/x/oauth2"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/credential/store"
)

func (s *Service) handleResolve(ctx context.Context, data []byte) (string, any, error) {
	return s.resolve(ctx, data, VerbResolve)
}

// handleRegistryKey answers the registry service's Smithery key on its own
// subject, so that only runners need cred.resolve.
func (s *Service) handleRegistryKey(ctx context.Context, data []byte) (string, any, error) {
	return s.resolve(ctx, data, VerbRegistry)
}

// resolve answers a runner (via resolve, for a server it owns) or the
// registry service (via registry, for the registry credentials), and
// publishes an audit event of the answer.
func (s *Service) resolve(ctx context.Context, data []byte, via string) (id string, out any, err error) {
	var in model.CredResolveRequest
	if err := bus.Decode(data, &in); err != nil {
		return "", nil, err
	}
	if err := checkID(in.ServerID); err != nil {
		return "", nil, err
	}
	id = in.ServerID
	defer func() { s.audit(id, in.Runner, in.Principal, via, err) }()
	if err := checkRecipient(in.RecipientKey); err != nil {
		return id, nil, err
	}
	r := ref{kind: model.CredServer, id: id}
	switch {
	case via == VerbRegistry && id != model.RegistryCredentialsID:
		return id, nil, apierr.Invalid("server_id", "cred.registry answers only the registry credentials")
	case via == VerbRegistry:
		r.kind = model.CredRegistry
	case id == model.RegistryCredentialsID:
		return id, nil, apierr.Invalid("server_id", "the registry credentials are resolved on cred.registry")
	default:
		if err := s.owner.check(ctx, in); err != nil {
			return id, nil, err
		}
	}
	if in.Principal != "" {
		if err := checkPrincipal(in.Principal); err != nil || via != VerbResolve {
			if err == nil {
				err = apierr.Invalid("principal", "only cred.resolve answers a principal's record")
			}
			return id, nil, err
		}
		// Derived here from the server the runner proved it owns: no other
		// server's or principal's record can be named.
		r = ref{kind: model.CredPrincipal, id: model.PrincipalCredentialID(id, in.Principal), owner: id}
	}
	reply, err := s.sealRecord(ctx, r, in.RecipientKey, resolvedAll)
	if err != nil {
		return id, nil, err
	}
	return id, reply, nil
}

// handleChatKey answers the chat service the API key of one chat profile on
// its own subject (cred.chatkey): only the records of chat profiles
// (model.ChatProfileCredentialID of the name), and of those only the key
// (model.ChatAPIKeyEnv), sealed to the requester's key like a resolve, with
// the same audit event.
func (s *Service) handleChatKey(ctx context.Context, data []byte) (id string, out any, err error) {
	var in credclient.ChatKeyRequest
	if err := bus.Decode(data, &in); err != nil {
		return "", nil, err
	}
	if !model.ValidSlug(in.Profile) {
		return "", nil, apierr.Invalid("profile", "profile must be a chat profile name (a slug)")
	}
	// The id is derived here, never taken from the request: no other
	// record can be asked for.
	id = model.ChatProfileCredentialID(in.Profile)
	defer func() { s.audit(id, "", "", VerbChatKey, err) }()
	if err := checkRecipient(in.RecipientKey); err != nil {
		return id, nil, err
	}
	reply, err := s.sealRecord(ctx, ref{kind: model.CredChatProfile, id: id}, in.RecipientKey, chatKey)
	if err != nil {
		return id, nil, err
	}
	return id, reply, nil
}

// handleOAuthClient answers the gateway the client secret of a server's
// confidential OAuth client and the client it registered dynamically
// (cred.oauthclient): only the record derived from the server id
// (model.OAuthClientCredentialID), and of it only those two, sealed to the
// requester's key, with the same audit event.
func (s *Service) handleOAuthClient(ctx context.Context, data []byte) (id string, out any, err error) {
	var in credclient.OAuthClientRequest
	if err := bus.Decode(data, &in); err != nil {
		return "", nil, err
	}
	if err := checkID(in.ServerID); err != nil {
		return "", nil, err
	}
	id = model.OAuthClientCredentialID(in.ServerID)
	defer func() { s.audit(id, "", "", VerbOAuthClient, err) }()
	if err := checkRecipient(in.RecipientKey); err != nil {
		return id, nil, err
	}
	reply, err := s.sealRecord(ctx, ref{kind: model.CredOAuthClient, id: id}, in.RecipientKey, oauthClient)
	if err != nil {
		return id, nil, err
	}
	return id, reply, nil
}

// oauthClient is what the gateway gets: the client secret and the
// dynamically registered client, those stored, or NOT_FOUND when neither is
// (a public client not registered yet).
func oauthClient(rec model.Credentials) (model.ResolvedCredentials, error) {
	out := map[string]string{}
	for _, name := range []string{model.OAuthClientSecretName, model.OAuthRegisteredClientName} {
		if v := rec.Env[name]; v != "" {
			out[name] = v
		}
	}
	if len(out) == 0 {
		return model.ResolvedCredentials{}, apierr.New(apierr.NotFound, "no OAuth client secret or registered client is stored for this server")
	}
	return model.ResolvedCredentials{Env: out}, nil
}

// checkPrincipal checks a principal id (libs/principal: key:…, oauth:…,
// agent:… or operator): printable, bounded.
func checkPrincipal(p string) error {
	if len(p) > 512 || strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return apierr.Invalid("principal", "principal must be a principal id (at most 512 printable characters)")
	}
	return nil
}

// checkRecipient checks the key a reply is to be sealed to.
func checkRecipient(key string) error {
	if !nkeys.IsValidPublicCurveKey(key) {
		return apierr.Invalid("recipient_key", "recipient_key must be an nkeys curve public key (X…)")
	}
	return nil
}

// sealRecord reads id's record (refreshing its OAuth token when due), takes
// what the requester may have of it (pick) and seals that to recipient with
// the service's key: the one answer of cred.resolve, cred.registry and
// cred.chatkey.
func (s *Service) sealRecord(ctx context.Context, r ref, recipient string, pick func(model.Credentials) (model.ResolvedCredentials, error)) (model.SealedReply, error) {
	// The lock covers a refresh and its write (see keyedMutex).
	unlock, err := s.locks.lock(ctx, r.key())
	if err != nil {
		return model.SealedReply{}, err
	}
	defer unlock()
	rec, err := s.get(ctx, r)
	if err != nil {
		return model.SealedReply{}, err
	}
	if r.owner != "" && rec.Owner == "" && !rec.Empty() {
		// Written before records kept their server: bind it now, so the
		// server's delete finds it.
		rec.Owner = r.owner
		if err := s.store.Put(ctx, r.key(), rec); err != nil {
			s.log.Warn("keeping the server of a principal's credentials", "code", apierr.Of(err), "error", apierr.From(err).Message)
		}
	}
	rec.OAuth = s.unsaved.adopt(ctx, s, r, rec)
	if rec.OAuth != nil {
		tok, err := s.freshToken(ctx, r, rec)
		if err != nil {
			return model.SealedReply{}, err
		}
		rec.OAuth = tok
	}
	answer, err := pick(rec)
	if err != nil {
		return model.SealedReply{}, err
	}
	kp, pub, err := s.keys.get(ctx)
	if err != nil {
		return model.SealedReply{}, err
	}
	plain, err := json.Marshal(answer)
	if err != nil {
		return model.SealedReply{}, apierr.Wrap(apierr.Internal, "encoding credentials", err)
	}
	sealed, err := kp.Seal(plain, recipient)
	clear(plain)
	if err != nil {
		return model.SealedReply{}, apierr.Wrap(apierr.Validation, "cannot seal to recipient_key", err).WithField("recipient_key")
	}
	return model.SealedReply{SenderKey: pub, Sealed: sealed}, nil
}

// resolvedAll is what a runner (or the registry service) gets: the whole record.
func resolvedAll(rec model.Credentials) (model.ResolvedCredentials, error) {
	return resolved(rec), nil
}

// chatKey is what the chat service gets: the profile's API key alone, or
// NOT_FOUND when none is stored.
func chatKey(rec model.Credentials) (model.ResolvedCredentials, error) {
	key := rec.Env[model.ChatAPIKeyEnv]
	if key == "" {
		return model.ResolvedCredentials{}, apierr.New(apierr.NotFound, "no API key is stored for this chat profile")
	}
	return model.ResolvedCredentials{Env: map[string]string{model.ChatAPIKeyEnv: key}}, nil
}

// resolved is what a runner gets: env values, headers, keyfile paths, and the
// OAuth access token placed in its env var and/or header.
func resolved(rec model.Credentials) model.ResolvedCredentials {
	out := model.ResolvedCredentials{Env: maps.Clone(rec.Env), Headers: maps.Clone(rec.Headers), Keyfiles: maps.Clone(rec.Keyfiles)}
	if o := rec.OAuth; o != nil {
		if o.EnvVar != "" {
			if out.Env == nil {
				out.Env = map[string]string{}
			}
			out.Env[o.EnvVar] = o.AccessToken
		}
		if o.Header != "" {
			if out.Headers == nil {
				out.Headers = map[string]string{}
			}
			out.Headers[o.Header] = bearer(o) + o.AccessToken
		}
		out.OAuth = &model.ResolvedOAuth{AccessToken: o.AccessToken, TokenType: o.TokenType, ExpiresAt: o.ExpiresAt, Header: o.Header, Resource: o.Resource}
	}
	return out
}

// bearer is the scheme put before the token in a header: the token's own
// type when it names one, else Bearer.
func bearer(o *model.OAuthToken) string {
	if o.TokenType != "" && !strings.EqualFold(o.TokenType, "bearer") {
		return o.TokenType + " "
	}
	return "Bearer "
}

// freshToken returns rec's OAuth token, refreshed and stored first when it
// has expired or expires within RefreshBefore.
func (s *Service) freshToken(ctx context.Context, r ref, rec model.Credentials) (*model.OAuthToken, error) {
	id := r.id
	tok := rec.OAuth
	now := s.opts.Now()
	if tok.ExpiresAt.IsZero() || now.Add(s.opts.RefreshBefore).Before(tok.ExpiresAt) {
		return tok, nil
	}
	expired := !now.Before(tok.ExpiresAt)
	if tok.RefreshToken == "" || tok.TokenURL == "" {
		if expired {
			return nil, apierr.Newf(apierr.Unauthorized, "OAuth token of server %s expired and cannot be refreshed (no refresh token or token_url); set a new token", id)
		}
		return tok, nil
	}
	nt, err := s.refresh(ctx, tok)
	if err != nil {
		var re *oauth2.RetrieveError
		attrs := []any{"server_id", id, "expired", expired}
		if errors.As(err, &re) {
			// Status and the OAuth error code only: the body may echo secrets.
			// The code is the endpoint's own text (up to oauth2's 1 MiB):
			// one line, bounded as a server's texts are.
			attrs = append(attrs, "status", re.Response.StatusCode, "oauth_error", model.OneLine(re.ErrorCode, model.CallEventErrorMax))
		} else {
			attrs = append(attrs, "error_type", errorKind(err))
		}
		s.log.Warn("OAuth token refresh failed", attrs...)
		if m, ok := s.store.(measuredStore); ok && m.versioned() && re != nil && re.ErrorCode == "invalid_grant" {
			// Another instance sharing the store (Vault) may have spent
			// the refresh token a moment ago: its token is the record's.
			if theirs := s.awaitRefreshElsewhere(ctx, r, tok); theirs != nil {
				return theirs, nil
			}
		}
		if expired {
			return nil, refreshError(tok.TokenURL, re, err)
		}
		return tok, nil // still valid for a little while: use it
	}
	_, err = s.update(ctx, r, func(cur model.Credentials) (model.Credentials, error) {
		if cur.OAuth == nil || cur.OAuth.RefreshToken != tok.RefreshToken {
			// Written meanwhile by another instance (a new authorization,
			// its own refresh): that write stands.
			return model.Credentials{}, errSuperseded
		}
		cur.OAuth = nt
		return cur, nil
	})
	if errors.Is(err, errSuperseded) {
		s.log.Info("OAuth token refreshed; the record was written meanwhile elsewhere, which stands", "server_id", id)
		return nt, nil
	}
	if err != nil {
		// The new token works; the runner gets it even though keeping it
		// failed. The refresh may have spent the stored refresh token
		// (rotation), so the next resolve must not refresh with it again:
		// it takes this token and tries the write again (unsavedTokens).
		s.unsaved.keep(r.key(), tok.RefreshToken, nt)
		s.log.Error("storing the refreshed OAuth token failed; kept in memory until it is stored", "server_id", id, "code", apierr.Of(err), "error", apierr.From(err).Message)
	} else {
		s.log.Info("OAuth token refreshed", "server_id", id, "expires_at", nt.ExpiresAt)
		s.changed(r, verbRefresh)
	}
	return nt, nil
}

// errSuperseded: the record changed since the refresh read it.
var errSuperseded = errors.New("the credential record changed meanwhile")

// refreshWait bounds how long a refresh refused as invalid_grant waits for
// another instance's write of the token it got (refreshPoll apart).
const (
	refreshWait = 3 * time.Second
	refreshPoll = 100 * time.Millisecond
)

// awaitRefreshElsewhere reads r's record again until it holds another
// refresh token than tok's (another instance refreshed and stored it) with
// an access token that is not expired, and returns that token; nil when
// none comes within refreshWait (or ctx ends).
func (s *Service) awaitRefreshElsewhere(ctx context.Context, r ref, tok *model.OAuthToken) *model.OAuthToken {
	deadline := time.Now().Add(refreshWait)
	for {
		rec, _, err := s.store.Get(ctx, r.key())
		if err == nil && rec.OAuth != nil && rec.OAuth.RefreshToken != tok.RefreshToken &&
			(rec.OAuth.ExpiresAt.IsZero() || s.opts.Now().Before(rec.OAuth.ExpiresAt)) {
			s.log.Info("OAuth token refreshed by another instance", "server_id", r.id)
			return rec.OAuth
		}
		if err != nil && !errors.Is(err, store.ErrNotFound) || time.Now().Add(refreshPoll).After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(refreshPoll):
		}
	}
}

// refresh exchanges the refresh token at the token endpoint (RFC 6749 §6).
func (s *Service) refresh(ctx context.Context, tok *model.OAuthToken) (*model.OAuthToken, error) {
	cfg := oauth2.Config{
		ClientID: tok.ClientID, ClientSecret: tok.ClientSecret,
		Endpoint: oauth2.Endpoint{TokenURL: tok.TokenURL},
	}
	hc := s.opts.HTTPClient
	if tok.Resource != "" {
		// The token was issued for this resource (RFC 8707): the refresh
		// asks for it again, as the authorization and code exchange did, so
		// an authorization server that binds tokens to an audience issues
		// the new one for the same server (not one of another audience, nor
		// a refusal for want of the parameter).
		hc = withFormParam(hc, "resource", tok.Resource)
	}
	ctx = context.WithValue(ctx, oauth2.HTTPClient, hc)
	// Only the refresh token goes in: a token source would hand back an
	// access token it thinks is still valid instead of refreshing it.
	got, err := cfg.TokenSource(ctx, &oauth2.Token{RefreshToken: tok.RefreshToken}).Token()
	if err != nil {
		return nil, err
	}
	if got.AccessToken == "" {
		return nil, errors.New("token endpoint returned no access token")
	}
	nt := *tok
	nt.AccessToken = got.AccessToken
	nt.ExpiresAt = got.Expiry.UTC()
	if got.TokenType != "" {
		nt.TokenType = got.TokenType
	}
	if got.RefreshToken != "" { // rotated
		nt.RefreshToken = got.RefreshToken
	}
	if scope, ok := got.Extra("scope").(string); ok && scope != "" {
		nt.Scopes = strings.Fields(scope)
	}
	return &nt, nil
}

// withFormParam is hc adding key=value to the form body of each POST it
// sends: x/oauth2's refresh grant takes no parameters of the caller's, and
// only the refresh's requests (its token endpoint, no redirects) go
// through this client.
func withFormParam(hc *http.Client, key, value string) *http.Client {
	c := *hc
	base := c.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	c.Transport = formParam{base: base, key: key, value: value}
	return &c
}

// formParam is the RoundTripper of withFormParam.
type formParam struct {
	base       http.RoundTripper
	key, value string
}

func (f formParam) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodPost || r.Body == nil || r.Header.Get("Content-Type") != "application/x-www-form-urlencoded" {
		return f.base.RoundTrip(r)
	}
	b, err := io.ReadAll(r.Body)
	_ = r.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("reading the token request: %w", err)
	}
	form, err := url.ParseQuery(string(b))
	if err != nil {
		return nil, fmt.Errorf("parsing the token request: %w", err)
	}
	form.Set(f.key, f.value)
	body := form.Encode()
	out := r.Clone(r.Context()) // a RoundTripper does not change its caller's request
	out.Body = io.NopCloser(strings.NewReader(body))
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(body)), nil }
	out.ContentLength = int64(len(body))
	return f.base.RoundTrip(out)
}

// refreshError is the answer to a resolve whose expired token could not be
// refreshed. UNAUTHORIZED only when the token endpoint refused the refresh
// (an OAuth error, or another answer that is not an outage): nothing but a
// new authorization helps. An endpoint that could not be reached, did not
// answer in time, failed (5xx) or is rate limiting (429) may work again
// shortly: SERVICE_UNAVAILABLE, which the runner retries, so a server does
// not stay down after a short outage of the authorization server. re is
// err's *oauth2.RetrieveError, nil when err is not one.
func refreshError(tokenURL string, re *oauth2.RetrieveError, err error) *apierr.Error {
	host := "the token endpoint"
	if u, perr := url.Parse(tokenURL); perr == nil && u.Host != "" {
		host = "the token endpoint at " + u.Host // not the URL: its query may hold secrets
	}
	var ue *url.Error
	var ne net.Error
	switch {
	case re != nil && re.Response != nil && (re.Response.StatusCode >= 500 || re.Response.StatusCode == http.StatusTooManyRequests):
		return apierr.Wrap(apierr.ServiceUnavailable, fmt.Sprintf("OAuth token expired and cannot be refreshed now: %s answered HTTP %d; retrying", host, re.Response.StatusCode), err)
	case re != nil:
		return apierr.Wrap(apierr.Unauthorized, "OAuth token expired and refresh failed", err)
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return apierr.Wrap(apierr.ServiceUnavailable, fmt.Sprintf("OAuth token expired and cannot be refreshed now: %s did not answer in time; retrying", host), err)
	case errors.As(err, &ue), errors.Is(err, context.Canceled):
		return apierr.Wrap(apierr.ServiceUnavailable, fmt.Sprintf("OAuth token expired and cannot be refreshed now: %s could not be reached (%s); retrying", host, errorKind(err)), err)
	}
	return apierr.Wrap(apierr.Unauthorized, "OAuth token expired and refresh failed", err)
}

// errorKind describes a non-OAuth refresh error without its text (which may
// include the token URL's query or server output).
func errorKind(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	}
	var de *net.DNSError
	if errors.As(err, &de) {
		return "host not found"
	}
	return "transport"
}

// unsavedTokens are OAuth tokens this instance got from a refresh but could
// not store (Vault sealed or down at that moment), by record key. The
// refresh may have spent the stored refresh token, so until the record is
// written again the kept token, not the stored one, is the record's.
type unsavedTokens struct {
	mu sync.Mutex
	m  map[string]unsavedToken
}

type unsavedToken struct {
	// spent is the refresh token the refresh used: the kept token stands
	// for the stored one only while the store still holds that one.
	spent string
	tok   *model.OAuthToken
}

func (u *unsavedTokens) keep(key, spent string, tok *model.OAuthToken) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil {
		u.m = map[string]unsavedToken{}
	}
	u.m[key] = unsavedToken{spent: spent, tok: tok}
}

// adopt returns the token of rec (read from the store, r's lock held): the
// token kept for r when the store still holds the refresh token it
// replaced, stored now if the store takes it (kept otherwise), or rec's own
// when someone wrote the record since (the kept one is dropped).
func (u *unsavedTokens) adopt(ctx context.Context, s *Service, r ref, rec model.Credentials) *model.OAuthToken {
	u.mu.Lock()
	k, ok := u.m[r.key()]
	delete(u.m, r.key())
	u.mu.Unlock()
	if !ok || rec.OAuth == nil || rec.OAuth.RefreshToken != k.spent {
		return rec.OAuth
	}
	rec.OAuth = k.tok
	if err := s.store.Put(ctx, r.key(), rec); err != nil {
		u.keep(r.key(), k.spent, k.tok)
		s.log.Warn("storing the refreshed OAuth token failed again; still kept in memory", "server_id", r.id, "code", apierr.Of(err), "error", apierr.From(err).Message)
	} else {
		s.log.Info("refreshed OAuth token stored", "server_id", r.id, "expires_at", k.tok.ExpiresAt)
		s.changed(r, verbRefresh)
	}
	return k.tok
}
