package rest

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// ServersReply is the body of GET /api/v1/servers.
type ServersReply struct {
	Servers []model.McpConfig `json:"servers"`
}

// StatusReply is the body of GET /api/v1/status.
type StatusReply struct {
	Servers []model.Status `json:"servers"`
}

// serverRef is the {id} of a server URL: a slug or a uuid (the config
// service accepts both).
func serverRef(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := strings.TrimSpace(r.PathValue("id"))
	if id == "" || len(id) > 128 {
		writeError(w, apierr.Invalid("id", "the server id in the URL must be a slug or a uuid"))
		return "", false
	}
	return id, true
}

func (a *API) listServers(w http.ResponseWriter, r *http.Request) {
	cfgs, err := a.client.ListConfigs(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	if cfgs == nil {
		cfgs = []model.McpConfig{}
	}
	writeJSON(w, http.StatusOK, ServersReply{Servers: cfgs})
}

func (a *API) createServer(w http.ResponseWriter, r *http.Request) {
	var in model.ConfigCreateRequest
	if !decodeBody(w, r, &in) {
		return
	}
	cfg, err := a.client.CreateConfig(r.Context(), in.Config, in.Secrets)
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Location", "/api/v1/servers/"+url.PathEscape(cfg.Slug))
	writeJSON(w, http.StatusCreated, cfg)
}

func (a *API) getServer(w http.ResponseWriter, r *http.Request) {
	id, ok := serverRef(w, r)
	if !ok {
		return
	}
	cfg, err := a.client.GetConfig(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, cfg)
}

// updateServer replaces the server named in the URL. The body's config may
// leave its id out; when it names one, it must be the URL's server.
func (a *API) updateServer(w http.ResponseWriter, r *http.Request) {
	id, ok := serverRef(w, r)
	if !ok {
		return
	}
	var in model.ConfigUpdateRequest
	if !decodeBody(w, r, &in) {
		return
	}
	cur, err := a.client.GetConfig(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	switch in.Config.ID {
	case "":
		in.Config.ID = cur.ID
	case cur.ID:
	default:
		writeError(w, apierr.Invalid("config.id", "config.id does not match the server in the URL"))
		return
	}
	cfg, err := a.client.UpdateConfig(r.Context(), in.Config, in.Secrets)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, cfg)
}

func (a *API) deleteServer(w http.ResponseWriter, r *http.Request) {
	id, ok := serverRef(w, r)
	if !ok {
		return
	}
	out, err := a.client.DeleteConfig(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) enableServer(w http.ResponseWriter, r *http.Request)  { a.setEnabled(w, r, true) }
func (a *API) disableServer(w http.ResponseWriter, r *http.Request) { a.setEnabled(w, r, false) }

func (a *API) setEnabled(w http.ResponseWriter, r *http.Request, enabled bool) {
	id, ok := serverRef(w, r)
	if !ok {
		return
	}
	cfg, err := a.client.SetEnabled(r.Context(), id, enabled)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, cfg)
}

// serverRuntime asks the runners for runtime.<verb> of one server (status,
// restart) and answers its status; the config lookup turns a uuid into the
// slug runners know and makes an unknown server a 404.
func (a *API) serverRuntime(verb string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, ok := serverRef(w, r)
		if !ok {
			return
		}
		cfg, err := a.client.GetConfig(r.Context(), id)
		if err != nil {
			writeError(w, err)
			return
		}
		st, err := a.client.Runtime(r.Context(), verb, cfg.Slug)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, st)
	}
}

// authorizeServer starts the OAuth authorization of a remote server and
// answers the URL to open in a browser; the outcome comes as an event
// (events.oauth.<server>, /api/v1/events) and in the server's status.
func (a *API) authorizeServer(w http.ResponseWriter, r *http.Request) {
	id, ok := serverRef(w, r)
	if !ok {
		return
	}
	if a.oauth == nil {
		writeError(w, apierr.New(apierr.ServiceUnavailable, "OAuth authorization is not set up on this gateway"))
		return
	}
	out, err := a.oauth.Start(r.Context(), id, "")
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) allStatus(w http.ResponseWriter, r *http.Request) {
	st, err := a.client.Status(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	if st == nil {
		st = []model.Status{}
	}
	writeJSON(w, http.StatusOK, StatusReply{Servers: st})
}

// serverConfig resolves the URL's server to its config (its id keys its
// secrets).
func (a *API) serverConfig(w http.ResponseWriter, r *http.Request) (model.McpConfig, bool) {
	ref, ok := serverRef(w, r)
	if !ok {
		return model.McpConfig{}, false
	}
	cfg, err := a.client.GetConfig(r.Context(), ref)
	if err != nil {
		writeError(w, err)
		return model.McpConfig{}, false
	}
	return cfg, true
}

// describeCredentials says which secrets a server has: names, never values.
func (a *API) describeCredentials(w http.ResponseWriter, r *http.Request) {
	cfg, ok := a.serverConfig(w, r)
	if !ok {
		return
	}
	d, err := a.creds.Describe(r.Context(), model.CredDescribeRequest{ServerID: cfg.ID})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

// setCredentials merges the body's secrets into the server's (?replace=true:
// they become exactly these). The reply describes them without values.
func (a *API) setCredentials(w http.ResponseWriter, r *http.Request) {
	replace, err := boolQuery(r, "replace")
	if err != nil {
		writeError(w, err)
		return
	}
	restart, err := restartQuery(r)
	if err != nil {
		writeError(w, err)
		return
	}
	cfg, ok := a.serverConfig(w, r)
	if !ok {
		return
	}
	var creds model.Credentials
	if !decodeBody(w, r, &creds) {
		return
	}
	if creds.Empty() && !replace {
		writeError(w, apierr.Invalid("body", "no secrets given: set env, headers, keyfiles or oauth"))
		return
	}
	// A secret the server would never see is refused (the same rule as the CLI's).
	if e := cfg.CheckCredentialsUsed(creds); e != nil {
		writeError(w, e)
		return
	}
	// A keyfile path every runner refuses (--keyfile-prefixes) would never reach it.
	if err := a.client.CheckKeyfiles(r.Context(), creds.Keyfiles, 0); err != nil {
		writeError(w, err)
		return
	}
	d, err := a.creds.Set(r.Context(), model.CredSetRequest{ServerID: cfg.ID, Credentials: creds, Replace: replace})
	if err != nil {
		writeError(w, err)
		return
	}
	a.applySecrets(w, r, cfg.Slug, restart, d)
}

// RestartedHeader says whether a credential change restarted the server
// ("true") so that it runs with the new secrets, or left it ("false": idle,
// stopped or disabled, or ?restart=false).
const RestartedHeader = "Mcpbus-Restarted"

// restartQuery reads ?restart= (default true). The credential routes read
// it before they write: a bad value found after the write would be a
// refusal that changed the secrets all the same.
func restartQuery(r *http.Request) (bool, error) {
	if !r.URL.Query().Has("restart") {
		return true, nil
	}
	return boolQuery(r, "restart")
}

// applySecrets restarts a running (or starting) server after its secrets
// changed, unless restart is false (?restart=false), and answers d.
func (a *API) applySecrets(w http.ResponseWriter, r *http.Request, slug string, restart bool, d model.CredDescription) {
	restarted := false
	if restart {
		var err error
		if restarted, err = a.client.ApplySecrets(r.Context(), slug); err != nil {
			writeError(w, err)
			return
		}
	}
	w.Header().Set(RestartedHeader, strconv.FormatBool(restarted))
	writeJSON(w, http.StatusOK, d)
}

// deleteCredentials removes the secrets named by ?name= (repeatable; "oauth"
// for the token), or all of them.
func (a *API) deleteCredentials(w http.ResponseWriter, r *http.Request) {
	restart, err := restartQuery(r)
	if err != nil {
		writeError(w, err)
		return
	}
	cfg, ok := a.serverConfig(w, r)
	if !ok {
		return
	}
	d, err := a.creds.Delete(r.Context(), model.CredDeleteRequest{ServerID: cfg.ID, Names: r.URL.Query()["name"]})
	if err != nil {
		writeError(w, err)
		return
	}
	a.applySecrets(w, r, cfg.Slug, restart, d)
}

// registrySearch searches the registries through mcp.v1.registry.search:
// ?q= (or query), registry (official, smithery, both), page, page_size.
func (a *API) registrySearch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := model.RegistrySearchRequest{Query: q.Get("q"), Registry: q.Get("registry")}
	if req.Query == "" {
		req.Query = q.Get("query")
	}
	for field, dst := range map[string]*int{"page": &req.Page, "page_size": &req.PageSize} {
		if v := q.Get(field); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				writeError(w, apierr.Invalid(field, field+" must be a whole number"))
				return
			}
			*dst = n
		}
	}
	var out model.RegistrySearchReply
	if err := bus.RequestJSON(r.Context(), a.nc, a.subj.Service("registry", "search"), req, &out, a.opts.RegistryTimeout); err != nil {
		writeError(w, err)
		return
	}
	if out.Results == nil {
		out.Results = []model.RegistryResult{}
	}
	writeJSON(w, http.StatusOK, out)
}

func boolQuery(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, apierr.Invalid(name, name+" must be true or false")
	}
	return b, nil
}
