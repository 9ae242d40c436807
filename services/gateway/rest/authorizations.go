package rest

import (
	"context"
	"net/http"
	"strings"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
)

// The caller's own upstream credentials for servers with auth.per_principal
// (issue 28 item 4), under /api/v1/me/authorizations: any key (or OAuth
// token) lists, starts, sets and revokes its own, and only its own; the
// principal is the authenticated caller, never a parameter.

// Authorization is one per-principal server as the caller sees it.
type Authorization struct {
	Server     string                 `json:"server"`
	Name       string                 `json:"name"`
	Authorized bool                   `json:"authorized"`
	Principal  string                 `json:"principal"`
	Secrets    *model.CredDescription `json:"secrets,omitempty"`
}

// AuthorizationsReply is the reply of GET /api/v1/me/authorizations.
type AuthorizationsReply struct {
	Authorizations []Authorization `json:"authorizations"`
}

// callerID is the bus principal id of the request's caller.
func callerID(w http.ResponseWriter, r *http.Request) (string, bool) {
	p := auth.PrincipalFrom(r.Context())
	if p == nil {
		writeError(w, apierr.New(apierr.Unauthorized, "an API key is required: send Authorization: Bearer <key>"))
		return "", false
	}
	return p.Bus().ID, true
}

// perPrincipalConfig resolves the URL's server, which must take
// per-principal credentials and have a tool the caller may call (another
// is NOT_FOUND, as a server that does not exist).
func (a *API) perPrincipalConfig(w http.ResponseWriter, r *http.Request) (model.McpConfig, bool) {
	cfg, ok := a.serverConfig(w, r)
	if !ok {
		return cfg, false
	}
	if !a.mayReach(auth.PrincipalFrom(r.Context()), cfg.Slug) {
		// Worded as the config service words a server it has not: the
		// reference trimmed as serverRef trims it (the raw one, " crm",
		// told a hidden server from none).
		writeError(w, apierr.Newf(apierr.NotFound, "server %s not found", strings.TrimSpace(r.PathValue("id"))).WithField("server"))
		return cfg, false
	}
	if _, _, e := model.PrincipalRecord(&cfg, ""); e != nil {
		writeError(w, e)
		return cfg, false
	}
	return cfg, true
}

// ownServer is the caller and the URL's per-principal server, for a route
// on the caller's own credentials (an error answered when not ok).
func (a *API) ownServer(w http.ResponseWriter, r *http.Request) (string, model.McpConfig, bool) {
	who, ok := callerID(w, r)
	if !ok {
		return "", model.McpConfig{}, false
	}
	cfg, ok := a.perPrincipalConfig(w, r)
	return who, cfg, ok
}

// errNoOAuth answers an OAuth route of a gateway without flows.
var errNoOAuth = apierr.New(apierr.ServiceUnavailable, "OAuth authorization is not set up on this gateway")

func (a *API) listAuthorizations(w http.ResponseWriter, r *http.Request) {
	who, ok := callerID(w, r)
	if !ok {
		return
	}
	cfgs, err := a.client.ListConfigs(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	out := AuthorizationsReply{Authorizations: []Authorization{}}
	p := auth.PrincipalFrom(r.Context())
	for _, cfg := range cfgs {
		if !cfg.Auth.PerPrincipal || !a.mayReach(p, cfg.Slug) {
			continue
		}
		d, err := a.describeOwn(r.Context(), cfg, who)
		if err != nil {
			writeError(w, err)
			return
		}
		out.Authorizations = append(out.Authorizations, authorization(cfg, who, d))
	}
	writeJSON(w, http.StatusOK, out)
}

// mayReach reports whether p may call a tool of server: a key with a tool
// filter has no business with the credentials of a server it cannot call.
func (a *API) mayReach(p *auth.Principal, server string) bool {
	if p == nil || p.Tools.IsZero() {
		return p != nil
	}
	for _, t := range a.catalog.tools() {
		if t.Server == server && p.AllowsTool(model.ToolNames(t.Name, t.Server, t.Tool)...) {
			return true
		}
	}
	return false
}

func (a *API) describeOwn(ctx context.Context, cfg model.McpConfig, who string) (model.CredDescription, error) {
	return a.creds.Describe(ctx, model.CredDescribeRequest{ServerID: model.PrincipalCredentialID(cfg.ID, who), Kind: model.CredPrincipal})
}

func authorization(cfg model.McpConfig, who string, d model.CredDescription) Authorization {
	held := d.OAuth != nil || len(d.Headers) > 0
	out := Authorization{Server: cfg.Slug, Name: cfg.Name, Authorized: held, Principal: who}
	if held {
		out.Secrets = &d
	}
	return out
}

// startAuthorization starts the caller's own OAuth flow with the server.
func (a *API) startAuthorization(w http.ResponseWriter, r *http.Request) {
	who, cfg, ok := a.ownServer(w, r)
	if !ok {
		return
	}
	if a.oauth == nil {
		writeError(w, errNoOAuth)
		return
	}
	out, err := a.oauth.Start(r.Context(), cfg.ID, who)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// continueAuthorization continues the caller's own OAuth flow (the link
// its start handed out opens the console's page, which calls this signed
// in): only the principal who started it may, and the answer sets the
// cookie the flow's callback requires in this browser.
func (a *API) continueAuthorization(w http.ResponseWriter, r *http.Request) {
	who, cfg, ok := a.ownServer(w, r)
	if !ok {
		return
	}
	c, ok := a.oauth.(OAuthContinuer)
	if !ok {
		writeError(w, errNoOAuth)
		return
	}
	var in model.OAuthContinueRequest
	if !decodeBody(w, r, &in) {
		return
	}
	out, cookie, err := c.Continue(r.Context(), cfg.Slug, in.Flow, who)
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	http.SetCookie(w, cookie)
	writeJSON(w, http.StatusOK, out)
}

// setAuthorization stores the caller's own static secrets for the server
// (headers: an API key per user), replacing what they had; never an OAuth
// token (see below).
func (a *API) setAuthorization(w http.ResponseWriter, r *http.Request) {
	who, cfg, ok := a.ownServer(w, r)
	if !ok {
		return
	}
	var creds model.Credentials
	if !decodeBody(w, r, &creds) {
		return
	}
	if creds.OAuth != nil {
		// Its token_url is where the credential service sends refresh
		// requests: from a caller, any address (cloud metadata, an internal
		// port). A principal's token comes only from the flow, whose
		// endpoints are the authorization server's checked metadata.
		writeError(w, apierr.Invalid("oauth", "an OAuth token of your own comes only from the authorization flow (POST /api/v1/me/authorizations/"+cfg.Slug+"); PUT takes headers"))
		return
	}
	if e := model.CheckPrincipalCredentials(creds); e != nil {
		writeError(w, e)
		return
	}
	d, err := a.creds.Set(r.Context(), model.CredSetRequest{ServerID: model.PrincipalCredentialID(cfg.ID, who), Kind: model.CredPrincipal,
		Credentials: creds, Replace: true, For: &model.PrincipalOf{ServerID: cfg.ID, Principal: who}})
	if err != nil {
		writeError(w, err)
		return
	}
	if err := a.client.ApplyPrincipalSecrets(r.Context(), cfg.Slug, who); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, authorization(cfg, who, d))
}

// revokeAuthorization removes the caller's own credentials for the server
// and closes their upstream session.
func (a *API) revokeAuthorization(w http.ResponseWriter, r *http.Request) {
	who, cfg, ok := a.ownServer(w, r)
	if !ok {
		return
	}
	d, err := a.creds.Delete(r.Context(), model.CredDeleteRequest{ServerID: model.PrincipalCredentialID(cfg.ID, who), Kind: model.CredPrincipal})
	if err != nil {
		writeError(w, err)
		return
	}
	if err := a.client.ApplyPrincipalSecrets(r.Context(), cfg.Slug, who); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, authorization(cfg, who, d))
}

// prompter hands out the caller's pending OAuth flow of a server, or starts
// one (oauthflow.Flows.Prompt).
type prompter interface {
	Prompt(ctx context.Context, server, principal string, done func(error)) (model.OAuthStartReply, error)
}

// withAuthorizationURL adds to e, a call refused for want of the caller's
// own credentials (model.NotAuthorized), the URL of the caller's OAuth flow
// with the server; e unchanged when the server does not ask for OAuth
// (static secrets: e says how to store them).
func (a *API) withAuthorizationURL(ctx context.Context, server string, e *apierr.Error) *apierr.Error {
	p, ok := a.oauth.(prompter)
	caller := auth.PrincipalFrom(ctx)
	if !ok || caller == nil {
		return e
	}
	out, err := p.Prompt(ctx, server, caller.Bus().ID, nil)
	if err != nil {
		return e
	}
	return apierr.Newf(e.Code, "%s\nOpen %s to authorize it as yourself (valid until %s UTC), then call again.",
		e.Message, out.AuthorizationURL, out.ExpiresAt.UTC().Format("15:04:05"))
}
