package rest

import (
	"context"
	"net/http"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// TokenRevoker revokes OAuth access tokens before they expire
// (jwtauth.Revocations).
type TokenRevoker interface {
	Revoke(ctx context.Context, req model.TokenRevokeRequest, by string) (model.TokenRevocation, error)
}

// SetRevoker installs the gateway's revocation list (before serving).
func (a *API) SetRevoker(r TokenRevoker) { a.revoker = r }

// revokeTokens serves POST /api/v1/tokens/revoke (admin keys): one access
// token by jti, or every token of a subject issued up to now.
func (a *API) revokeTokens(w http.ResponseWriter, r *http.Request) {
	var in model.TokenRevokeRequest
	if !decodeBody(w, r, &in) {
		return
	}
	if a.revoker == nil {
		writeError(w, apierr.New(apierr.ServiceUnavailable, "token revocation is not set up on this gateway"))
		return
	}
	out, err := a.revoker.Revoke(r.Context(), in, requester(r))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}
