package rest

import (
	"net/http"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
)

// The chat profiles under /api/v1/chat/profiles (admin scope: a profile holds
// an API key and decides the tools a conversation may call).

// ProfilePutBody is the body of PUT /api/v1/chat/profiles/{name}: the profile
// and, optionally, its provider API key in clear over HTTP, which the gateway
// seals to the credential service before anything goes on the bus (no key
// keeps the stored one), or remove_api_key. No reply ever holds a key.
type ProfilePutBody struct {
	model.Profile
	APIKey       string `json:"api_key,omitempty"`
	RemoveAPIKey bool   `json:"remove_api_key,omitempty"`
}

// profileRef is the {name} of a profile URL.
func profileRef(w http.ResponseWriter, r *http.Request) (string, bool) {
	ref := model.ChatProfileRef{Name: r.PathValue("name")}
	if err := ref.Validate(); err != nil {
		writeError(w, err)
		return "", false
	}
	return ref.Name, true
}

func (a *API) listProfiles(w http.ResponseWriter, r *http.Request) {
	list, err := a.client.ListProfiles(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	if list == nil {
		list = []model.Profile{}
	}
	writeJSON(w, http.StatusOK, model.ChatProfileListReply{Profiles: list})
}

func (a *API) getProfile(w http.ResponseWriter, r *http.Request) {
	name, ok := profileRef(w, r)
	if !ok {
		return
	}
	out, err := a.client.GetProfile(r.Context(), name)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// putProfile creates or replaces the profile named in the URL; the body may
// leave its name out, and when it names one it must be the URL's.
func (a *API) putProfile(w http.ResponseWriter, r *http.Request) {
	name, ok := profileRef(w, r)
	if !ok {
		return
	}
	var in ProfilePutBody
	if !decodeBody(w, r, &in) {
		return
	}
	switch in.Name {
	case "":
		in.Name = name
	case name:
	default:
		writeError(w, apierr.Invalid("name", "name does not match the profile in the URL"))
		return
	}
	if in.APIKey != "" && in.RemoveAPIKey {
		writeError(w, apierr.Invalid("remove_api_key", "give api_key or remove_api_key, not both"))
		return
	}
	out, err := a.client.PutProfile(r.Context(), in.Profile, client.ProfileKey{Set: in.APIKey, Remove: in.RemoveAPIKey})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) deleteProfile(w http.ResponseWriter, r *http.Request) {
	name, ok := profileRef(w, r)
	if !ok {
		return
	}
	if err := a.client.DeleteProfile(r.Context(), name); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, model.ChatProfileRef{Name: name})
}
