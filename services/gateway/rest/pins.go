package rest

import (
	"net/http"

	"github.com/mcpbus/mcpbus/libs/model"
)

// PinsReply is the body of GET /api/v1/servers/{id}/pins: the server's tools
// whose definition changed since it was pinned, each with both definitions.
type PinsReply = model.ToolsReviewReply

// PinDecision is the body of POST /api/v1/servers/{id}/pins/approve: the
// pending definition of Tool whose hash is Hash is pinned, or, with Reject,
// dropped. The hash names exactly what was reviewed.
type PinDecision struct {
	Tool   string `json:"tool"`
	Hash   string `json:"hash"`
	Reject bool   `json:"reject,omitempty"`
}

// listPins answers the server's pending tool changes (mcp.v1.tools.review,
// asked through the config's slug, which is what the runners key them by).
func (a *API) listPins(w http.ResponseWriter, r *http.Request) {
	cfg, ok := a.serverConfig(w, r)
	if !ok {
		return
	}
	changes, err := a.client.ToolsReview(r.Context(), cfg.Slug)
	if err != nil {
		writeError(w, err)
		return
	}
	if changes == nil {
		changes = []model.ToolPin{}
	}
	writeJSON(w, http.StatusOK, PinsReply{Changes: changes})
}

// decidePin approves or rejects one pending definition
// (mcp.v1.tools.approve) and answers the pin as it now is.
func (a *API) decidePin(w http.ResponseWriter, r *http.Request) {
	cfg, ok := a.serverConfig(w, r)
	if !ok {
		return
	}
	var in PinDecision
	if !decodeBody(w, r, &in) {
		return
	}
	pin, err := a.client.ToolsApprove(r.Context(), model.ToolsApproveRequest{Server: cfg.Slug, Tool: in.Tool, Hash: in.Hash, Reject: in.Reject})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, pin)
}
