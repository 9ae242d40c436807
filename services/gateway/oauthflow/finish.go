package oauthflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/nats-io/nats.go/micro"
	"golang.org/x/oauth2"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// finishTimeout bounds storing the tokens and restarting the server once
// the user has approved (the flow's own deadline may be nearly spent).
const finishTimeout = 30 * time.Second

// run drives go-sdk's flow to its end, stores the tokens, restarts the
// server and publishes the outcome; reg, when not nil, is the registrar of
// a dynamically registering flow, which first finds its authorization
// server.
func (f *Flows) run(ctx context.Context, h *auth.AuthorizationCodeHandler, reg *registrar, cfg *model.McpConfig, fl *flow, req *http.Request, resp *http.Response) error {
	var err error
	if reg != nil {
		reg.target, err = discover(ctx, reg.hc, req, resp)
	}
	if err == nil {
		err = h.Authorize(ctx, req, resp)
	} else {
		_ = resp.Body.Close()
	}
	var re *oauth2.RetrieveError
	refused := fl.registered != "" && errors.As(err, &re) && re.ErrorCode == "invalid_client"
	if refused {
		// The authorization server no longer takes the registered client:
		// the next flow registers a new one (once: this one does not retry).
		f.forgetClient(cfg, fl.registered)
	}
	if err == nil && fl.token == nil {
		err = errors.New("the token exchange gave no token")
	}
	if err == nil {
		err = f.store(cfg, fl)
	}
	var e *apierr.Error
	if err != nil {
		e = failure(ctx, err, cfg.Transport.OAuth != nil && cfg.Transport.OAuth.ClientID != "", fl.noAnswer.Load())
		if refused {
			e = apierr.Wrap(apierr.Unauthorized, MsgRegisteredClientRefused, err)
		}
		f.log.Warn("OAuth authorization failed", append([]any{"server", cfg.Slug, "code", e.Code, "error", e.Message}, causeAttrs(err)...)...)
	} else {
		f.log.Info("OAuth authorization completed", "server", cfg.Slug, "principal", fl.principal, "expires_at", fl.token.Expiry)
	}
	f.publish(cfg.Slug, fl.principal, e)
	if e != nil {
		fl.outcome <- e
		return e
	}
	fl.outcome <- nil
	return nil
}

// causeAttrs describes why a flow failed for the log: the token endpoint's
// status and OAuth error code only (its body may echo what was sent), else
// the error's text up to the first response body it quotes: go-sdk builds
// it from metadata and URLs, but quotes a registration response it cannot
// decode whole, client secret included.
func causeAttrs(err error) []any {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		// The code is the endpoint's own text (up to oauth2's 1 MiB): one
		// line, bounded as a server's texts are.
		return []any{"status", re.Response.StatusCode, "oauth_error", model.OneLine(re.ErrorCode, model.CallEventErrorMax)}
	}
	cause := err.Error()
	if i := strings.IndexByte(cause, '{'); i >= 0 {
		cause = cause[:i] + "… (a response body, left out)"
	}
	return []any{"cause", cause}
}

// MsgClientRefused is the failure of a token endpoint that refused the
// client's credentials (invalid_client): most likely a wrong or missing
// client secret.
const MsgClientRefused = "Authorization failed: the authorization server refused the OAuth client (invalid_client). Check transport.oauth.client_id and its secret (mcpbus cred set <server> --oauth-client-secret)."

// MsgRegisteredClientRefused is the failure of a token endpoint that
// refused the client mcpbus registered dynamically (invalid_client): it is
// forgotten, and the next authorization registers a new one.
const MsgRegisteredClientRefused = "Authorization failed: the authorization server no longer accepts mcpbus's registered OAuth client; it was dropped, and the next authorization registers a new one. Please try again."

// failure maps a failed flow to the product's messages; preregistered: the
// client is the config's (its secret, if any, is the operator's to fix);
// noAnswer: a request of the flow timed out (go-sdk reports discovery
// errors as text, so the flow's client notes it).
func failure(ctx context.Context, err error, preregistered, noAnswer bool) *apierr.Error {
	var ae *apierr.Error
	var re *oauth2.RetrieveError
	switch {
	case preregistered && errors.As(err, &re) && re.ErrorCode == "invalid_client":
		return apierr.Wrap(apierr.Unauthorized, MsgClientRefused, err)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return apierr.Wrap(apierr.Network, model.MsgAuthorizeTimeout, err)
	case errors.Is(ctx.Err(), context.Canceled):
		return apierr.Wrap(apierr.ServiceUnavailable, "Authorization cancelled (a newer one started, the API key that started it was revoked, or the gateway stopped).", err)
	case noAnswer:
		return apierr.Wrap(apierr.Network, MsgNoAnswer, err)
	case errors.As(err, &ae) && ae.Code != apierr.Unauthorized:
		return ae // storing the tokens failed: the credential or config service said why
	}
	return apierr.Wrap(apierr.Unauthorized, model.MsgAuthorizeFailed, err)
}

// store hands the tokens and what refreshing them needs to the credential
// service, sealed, through config.update (which marks the server
// auth_type oauth), and restarts the server if it is enabled so that it
// connects with them.
func (f *Flows) store(cfg *model.McpConfig, fl *flow) error {
	ctx, cancel := context.WithTimeout(context.Background(), finishTimeout)
	defer cancel()
	t, c := fl.token, fl.conf
	tok := &model.OAuthToken{
		AccessToken: t.AccessToken, RefreshToken: t.RefreshToken, TokenType: t.TokenType,
		ExpiresAt: t.Expiry.UTC(), TokenURL: c.Endpoint.TokenURL, ClientID: c.ClientID, ClientSecret: c.ClientSecret,
		Header: model.OAuthHeader,
	}
	if u, err := url.Parse(c.Endpoint.AuthURL); err == nil {
		tok.Provider = u.Host
	}
	// The resource indicator go-sdk asked the token for (RFC 8707): the
	// runner sends the token to no other server URL.
	fl.mu.Lock()
	if u, err := url.Parse(fl.authURL); err == nil {
		tok.Resource = u.Query().Get("resource")
	}
	fl.mu.Unlock()
	if scope, ok := t.Extra("scope").(string); ok && scope != "" {
		tok.Scopes = strings.Fields(scope)
	} else {
		tok.Scopes = c.Scopes
	}
	if fl.principal != "" {
		return f.storeForPrincipal(ctx, cfg, fl.principal, tok)
	}
	cur, err := f.client.GetConfig(ctx, cfg.ID)
	if err != nil {
		return err
	}
	cur.AuthType = model.AuthOAuth
	if cur, err = f.client.UpdateConfig(ctx, cur, &model.Credentials{OAuth: tok}); err != nil {
		return err
	}
	if cur.Enabled {
		// The config change restarts a server whose auth_type changed; a
		// re-authorization changes nothing there, so restart it here.
		if _, err := f.client.Runtime(ctx, "restart", cur.Slug); err != nil {
			f.log.Warn("restarting the server after its authorization failed", "server", cur.Slug, "code", apierr.Of(err), "error", apierr.From(err).Message)
		}
	}
	return nil
}

// storeForPrincipal keeps principal's own tokens in their record of the
// server (kind principal, sealed on the way) and closes their upstream
// session, so their next call carries the new token; the server itself
// and every other principal are left as they are.
func (f *Flows) storeForPrincipal(ctx context.Context, cfg *model.McpConfig, principal string, tok *model.OAuthToken) error {
	if _, err := f.secrets.Set(ctx, model.CredSetRequest{ServerID: model.PrincipalCredentialID(cfg.ID, principal),
		Kind: model.CredPrincipal, Credentials: model.Credentials{OAuth: tok},
		For: &model.PrincipalOf{ServerID: cfg.ID, Principal: principal}}); err != nil {
		return err
	}
	if err := f.client.ApplyPrincipalSecrets(ctx, cfg.Slug, principal); err != nil {
		f.log.Warn("closing the principal's upstream session after their authorization failed", "server", cfg.Slug, "principal", principal, "code", apierr.Of(err))
	}
	return nil
}

// publish sends the outcome on events.oauth.<server> (nil: authorized).
func (f *Flows) publish(server, principal string, e *apierr.Error) {
	ev := model.OAuthEvent{Type: model.OAuthAuthorized, Server: server, Principal: principal, At: time.Now().UTC()}
	if e != nil {
		ev.Type, ev.Code, ev.Message = model.OAuthFailed, string(e.Code), e.Message
	}
	data, err := json.Marshal(ev)
	if err != nil {
		return
	}
	f.opts.Audit.Chain(f.subj.Event("oauth", server), data)
	if err := f.nc.Publish(f.subj.Event("oauth", server), data); err != nil {
		f.log.Warn("publishing the OAuth outcome failed", "server", server, "error", err)
	}
}

// callbackWait bounds how long the callback page waits for the token
// exchange to say how it went.
const callbackWait = 30 * time.Second

// Callback serves GET /oauth/callback, where the authorization server sends
// the browser back. It needs no API key: the state binds it to one flow,
// it works once, and not past the flow's deadline; a per-principal flow's
// also needs the cookie its continue set in the starter's browser
// (binding.go). The flow may be held by another gateway instance: the
// callback goes to it over the bus, sealed (relay.go), even when it is
// this one.
func (f *Flows) Callback(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	cb := model.OAuthCallback{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss"), Error: q.Get("error")}
	if cb.Error == "" && cb.Code == "" {
		cb.Error = "invalid_request"
	}
	srv, err := "", error(errUnknown)
	if cb.State != "" {
		cb.Cookie = f.bindingCookie(r, cb.State)
		srv, err = f.relay(r.Context(), cb)
		if err == nil && cb.Cookie != "" {
			http.SetCookie(w, f.cookie(flowID(cb.State), "", time.Time{}))
		}
	}
	if r.Context().Err() != nil {
		return
	}
	if err != nil {
		e := apierr.From(err)
		status := http.StatusBadRequest
		if e.Code == apierr.ServiceUnavailable || e.Code == apierr.Network {
			status = e.Code.HTTPStatus()
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(e.Message + "\n"))
		return
	}
	_, _ = w.Write([]byte("mcpbus is authorized with " + srv + ". You may close this window.\n"))
}

// AddEndpoint serves mcp.v1.oauth.start on svc (the gateway's micro
// service, so its queue group): the CLI's `mcpbus servers auth`.
func (f *Flows) AddEndpoint(svc micro.Service, log *slog.Logger) error {
	// RefuseReply: the endpoint is added outside bus.StartService, which
	// refuses a reply that is not an inbox for its own endpoints.
	h := bus.RefuseReply(log, bus.JSONHandler(log, func(ctx context.Context, req micro.Request) (any, error) {
		var in model.OAuthStartRequest
		if err := bus.Decode(req.Data(), &in); err != nil {
			return nil, err
		}
		return f.StartFor(ctx, in.Server, in.Principal)
	}))
	if err := svc.AddEndpoint("oauth-start", h, micro.WithEndpointSubject(f.subj.Service("oauth", "start"))); err != nil {
		return fmt.Errorf("gateway: oauth.start endpoint: %w", err)
	}
	return nil
}
