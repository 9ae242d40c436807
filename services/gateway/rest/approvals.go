package rest

import (
	"net/http"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
)

// The held calls of the approval rules (libs/approvals):
// listed and decided by admins and by the approvers a rule names (any key
// may ask; the store decides who sees and decides what), the rules
// themselves read by anyone with a key and replaced by admins.

// approvalsReady answers SERVICE_UNAVAILABLE when the API has no store.
func (a *API) approvalsReady(w http.ResponseWriter) bool {
	if a.opts.Approvals == nil {
		writeError(w, apierr.New(apierr.ServiceUnavailable, "this gateway does not hold calls for approval"))
		return false
	}
	return true
}

// caller is the principal id of the request and whether it is an admin.
func caller(r *http.Request) (string, bool) {
	p := auth.PrincipalFrom(r.Context())
	if p == nil {
		return "", false
	}
	return p.Bus().ID, p.Can(auth.ScopeAdmin)
}

func (a *API) listApprovals(w http.ResponseWriter, r *http.Request) {
	if !a.approvalsReady(w) {
		return
	}
	id, admin := caller(r)
	calls, err := a.opts.Approvals.List(r.Context(), id, admin)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, model.ApprovalsListReply{Calls: calls})
}

// decideApproval approves or denies a held call; the body ({"reason": …})
// is optional.
func (a *API) decideApproval(decision string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !a.approvalsReady(w) {
			return
		}
		var in struct {
			Reason string `json:"reason,omitempty"`
		}
		if r.ContentLength != 0 && !decodeBody(w, r, &in) {
			return
		}
		id, admin := caller(r)
		h, err := a.opts.Approvals.Decide(r.Context(), model.ApprovalDecideRequest{ID: r.PathValue("id"), Decision: decision, Reason: in.Reason}, id, admin, false)
		if err != nil {
			writeError(w, err)
			return
		}
		a.log.Info("held call decided", "id", h.ID, "tool", h.Tool, "decision", h.Decision, "by", id)
		writeJSON(w, http.StatusOK, h)
	}
}

// The rules name principals (approvers, whom a rule holds): an admin's to
// read, as to change.
func (a *API) getApprovalRules(w http.ResponseWriter, r *http.Request) {
	if !a.approvalsReady(w) || !rulesAdmin(w, r, "read") {
		return
	}
	writeJSON(w, http.StatusOK, a.opts.Approvals.Rules())
}

// rulesAdmin answers a caller who is not an admin 403, as a missing scope
// is answered (the code stays UNAUTHORIZED: the contract has no FORBIDDEN).
func rulesAdmin(w http.ResponseWriter, r *http.Request, verb string) bool {
	if _, admin := caller(r); !admin {
		auth.WriteError(w, http.StatusForbidden, apierr.New(apierr.Unauthorized, "only an admin may "+verb+" the approval rules"))
		return false
	}
	return true
}

func (a *API) putApprovalRules(w http.ResponseWriter, r *http.Request) {
	if !a.approvalsReady(w) || !rulesAdmin(w, r, "change") {
		return
	}
	id, _ := caller(r)
	var in model.ApprovalRules
	if !decodeRequiredBody(w, r, &in) {
		return
	}
	out, err := a.opts.Approvals.PutRules(r.Context(), in)
	if err != nil {
		writeError(w, err)
		return
	}
	a.log.Info("approval rules replaced", "rules", len(out.Rules), "default", out.Default, "by", id)
	writeJSON(w, http.StatusOK, out)
}
