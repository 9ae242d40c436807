package rest

import (
	"errors"
	"net/http"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
)

// The routes a client such as the web console needs besides the servers
// API: who am I, restart, config history and rollback, install plans, API
// keys and agent identities.

// MeReply is the body of GET /api/v1/me: the caller's key (never its secret)
// and what the console needs to know of the gateway.
type MeReply struct {
	KeyID  string   `json:"key_id"`
	Name   string   `json:"name"`
	Scopes []string `json:"scopes"`
	// JaegerURL is the base URL of the Jaeger UI ("" when none is set).
	JaegerURL string `json:"jaeger_url"`
}

// RollbackBody is the body of POST /api/v1/servers/{id}/rollback.
type RollbackBody struct {
	// Version is the server's own version to restore (history's version);
	// Revision, the store's revision, is still accepted. Give one.
	Version  uint64 `json:"version,omitempty"`
	Revision uint64 `json:"revision,omitempty"`
}

// me answers any valid key, whatever its scopes (auth.ScopeAnyKey), with
// the anonymous principal when auth is off.
func (a *API) me(w http.ResponseWriter, r *http.Request) {
	p := auth.PrincipalFrom(r.Context())
	if p == nil { // the middleware always sets one; never answer without
		writeError(w, apierr.New(apierr.Unauthorized, "an API key is required: send Authorization: Bearer <key>"))
		return
	}
	scopes := p.Scopes
	if scopes == nil {
		scopes = []string{}
	}
	writeJSON(w, http.StatusOK, MeReply{KeyID: p.KeyID, Name: p.Name, Scopes: scopes, JaegerURL: a.opts.JaegerURL})
}

// serverHistory lists the stored revisions of a server's config, oldest first.
func (a *API) serverHistory(w http.ResponseWriter, r *http.Request) {
	id, ok := serverRef(w, r)
	if !ok {
		return
	}
	revs, err := a.client.ConfigHistory(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	if revs == nil {
		revs = []model.ConfigRevision{}
	}
	writeJSON(w, http.StatusOK, model.ConfigHistoryReply{Revisions: revs})
}

// rollbackServer makes a server's config what it was at a revision and
// answers the config now (a new revision).
func (a *API) rollbackServer(w http.ResponseWriter, r *http.Request) {
	id, ok := serverRef(w, r)
	if !ok {
		return
	}
	var in RollbackBody
	if !decodeBody(w, r, &in) {
		return
	}
	if in.Version == 0 && in.Revision == 0 {
		writeError(w, apierr.Invalid("version", "version must be a positive number (see GET /api/v1/servers/{id}/history)"))
		return
	}
	cfg, err := a.client.RollbackConfig(r.Context(), model.ConfigRollbackRequest{Server: id, Version: in.Version, Revision: in.Revision})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, cfg)
}

// registryPlan asks the registry service for the install plan of an entry
// (mcp.v1.registry.get, what `mcpbus add --from-registry` uses): the
// secrets to ask for, the inputs and, when nothing is missing, the draft
// config that POST /api/v1/servers accepts as it is.
func (a *API) registryPlan(w http.ResponseWriter, r *http.Request) {
	var in model.RegistryGetRequest
	if !decodeBody(w, r, &in) {
		return
	}
	in.Name = strings.TrimSpace(in.Name)
	if in.Name == "" {
		writeError(w, apierr.Invalid("name", "name is required: the registry name of the server (see GET /api/v1/registry/search)"))
		return
	}
	var out model.InstallPlan
	if err := bus.RequestJSON(r.Context(), a.nc, a.subj.Service("registry", "get"), in, &out, a.opts.RegistryTimeout); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// keysReady answers SERVICE_UNAVAILABLE when the API was made without the
// key store.
func (a *API) keysReady(w http.ResponseWriter) bool {
	if a.keys.Store == nil {
		writeError(w, apierr.New(apierr.ServiceUnavailable, "this gateway does not manage API keys over HTTP"))
		return false
	}
	return true
}

// requester names the caller in the key store's audit line.
func requester(r *http.Request) string {
	if p := auth.PrincipalFrom(r.Context()); p != nil {
		return "key " + p.KeyID
	}
	return "http"
}

// listKeys lists the API keys (?include_revoked=true: revoked ones too),
// never a secret.
func (a *API) listKeys(w http.ResponseWriter, r *http.Request) {
	all, err := boolQuery(r, "include_revoked")
	if err != nil {
		writeError(w, err)
		return
	}
	if !a.keysReady(w) {
		return
	}
	out, err := a.keys.List(r.Context(), model.KeyListRequest{IncludeRevoked: all})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// createKey makes a key; its secret is in this reply and never again.
func (a *API) createKey(w http.ResponseWriter, r *http.Request) {
	var in model.KeyCreateRequest
	if !decodeBody(w, r, &in) {
		return
	}
	if !a.keysReady(w) {
		return
	}
	out, err := a.keys.Create(r.Context(), in, requester(r))
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store") // the one answer holding the secret
	writeJSON(w, http.StatusCreated, out)
}

// revokeKey revokes a key: refused from now on, its open streams and MCP
// sessions ended.
func (a *API) revokeKey(w http.ResponseWriter, r *http.Request) {
	if !a.keysReady(w) {
		return
	}
	out, err := a.keys.Revoke(r.Context(), model.KeyRevokeRequest{ID: strings.TrimSpace(r.PathValue("id"))}, requester(r))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// agents requests mcp.v1.agents.<verb>, served by the host of `mcpbus up`
// (it owns the embedded NATS server's users); elsewhere nothing answers.
func (a *API) agents(r *http.Request, verb string, in, out any) error {
	err := bus.RequestJSON(r.Context(), a.nc, a.subj.Service("agents", verb), in, out, a.opts.AgentsTimeout)
	if errors.Is(err, nats.ErrNoResponders) {
		return apierr.Wrap(apierr.ServiceUnavailable, "agent identities are managed by mcpbus up (its embedded NATS server); "+
			"this bus has no agents service: give agents NATS users in the server's own configuration (see deploy/nats)", err)
	}
	return err
}

// listAgents lists the agent identities (names, allowed tools, where the
// seed file is on the host; never a seed).
func (a *API) listAgents(w http.ResponseWriter, r *http.Request) {
	var out model.AgentList
	if err := a.agents(r, "list", struct{}{}, &out); err != nil {
		writeError(w, err)
		return
	}
	if out.Agents == nil {
		out.Agents = []model.Agent{}
	}
	writeJSON(w, http.StatusOK, out)
}

// createAgent makes an agent identity. Its seed never leaves the host of
// mcpbus up: the reply says where the 0600 seed file is.
func (a *API) createAgent(w http.ResponseWriter, r *http.Request) {
	var in model.AgentCreateRequest
	if !decodeBody(w, r, &in) {
		return
	}
	if err := model.ValidateAgentName(in.Name); err != nil {
		writeError(w, err)
		return
	}
	var out model.Agent
	if err := a.agents(r, "create", in, &out); err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Location", "/api/v1/agents/"+out.Name)
	writeJSON(w, http.StatusCreated, out)
}

// revokeAgent removes an agent identity: its seed no longer connects and
// its connections are closed.
func (a *API) revokeAgent(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimSpace(r.PathValue("name"))
	if err := model.ValidateAgentName(name); err != nil {
		writeError(w, err)
		return
	}
	var out model.AgentRef
	if err := a.agents(r, "revoke", model.AgentRef{Name: name}, &out); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}
