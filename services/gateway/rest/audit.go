package rest

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/audit"
)

// Bounds of one page of GET /api/v1/audit/verify: a long stream is
// verified in steps (?from=<next>), each within AuditTimeout.
const (
	DefaultAuditPage = 10000
	MaxAuditPage     = 100000
	maxAuditFaults   = 20
)

// AuditChain is one writer's chain as verified in a page: ok, or its first
// fault (altered, missing, reordered, bad signature, unknown key, malformed,
// unprotected).
type AuditChain struct {
	Chain string `json:"chain"`
	// Writer is the identity that holds the chain's key ("" unknown).
	Writer        string         `json:"writer"`
	Role          string         `json:"role"`
	Records       int            `json:"records"`
	First         uint64         `json:"first"`
	Last          uint64         `json:"last"`
	LastStreamSeq uint64         `json:"last_stream_seq"`
	OK            bool           `json:"ok"`
	Fault         *audit.Problem `json:"fault,omitempty"`
}

// AuditVerifyReply is the body of GET /api/v1/audit/verify.
type AuditVerifyReply struct {
	OK bool `json:"ok"`
	// From is the stream sequence the page began at; FromStart says it was
	// the stream's first record ever (else each chain's first record read
	// is its anchor, as with mcpbus audit verify --from).
	From      uint64 `json:"from"`
	FromStart bool   `json:"from_start"`
	Records   int    `json:"records"`
	Events    int    `json:"events"`
	// Next is where the next page starts (0: this page reached the end).
	Next   uint64       `json:"next"`
	Chains []AuditChain `json:"chains"`
	// Problems are the first broken links in stream order (at most 20 of
	// ProblemCount).
	Problems     []audit.Problem `json:"problems"`
	ProblemCount int             `json:"problem_count"`
	VerifiedAt   time.Time       `json:"verified_at"`
}

// verifyAudit serves GET /api/v1/audit/verify?from=<seq>&limit=<n> (admin
// keys): the chains of the audit stream checked with libs/audit's verifier
// against the writers' keys, one bounded page at a time.
func (a *API) verifyAudit(w http.ResponseWriter, r *http.Request) {
	if len(a.opts.AuditKeys) == 0 {
		writeError(w, apierr.New(apierr.ServiceUnavailable, "this gateway has no audit writer keys to verify against (start it with --audit-keys)"))
		return
	}
	from, limit := uint64(1), DefaultAuditPage
	if v := r.URL.Query().Get("from"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			writeError(w, apierr.Invalid("from", "from is a stream sequence (1 or more)"))
			return
		}
		from = n
	}
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxAuditPage {
			writeError(w, apierr.Invalid("limit", "limit is 1 to "+strconv.Itoa(MaxAuditPage)+" records"))
			return
		}
		limit = n
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.opts.AuditTimeout)
	defer cancel()
	v := audit.NewVerifier(a.opts.AuditKeys, audit.VerifyOptions{})
	page, err := audit.ReadPage(ctx, a.js, audit.From{Seq: from}, limit, a.opts.AuditTimeout, v.Add)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		writeError(w, apierr.New(apierr.NotFound, "no audit stream on this bus yet"))
		return
	case errors.Is(err, context.DeadlineExceeded):
		writeError(w, apierr.New(apierr.Network, "verifying the audit stream took too long: ask for a smaller page (limit)"))
		return
	case err != nil:
		writeError(w, apierr.Wrap(apierr.ServiceUnavailable, "reading the audit stream", err))
		return
	}
	v.SetFromStart(page.FromStart)
	v.SetStream(page.Start, page.Floor)
	v.SetUnprotected(page.Unprotected)
	rep := v.Report()
	out := AuditVerifyReply{OK: rep.OK(), From: from, FromStart: page.FromStart, Records: rep.Records, Events: rep.Events,
		Chains: []AuditChain{}, Problems: rep.Problems[:min(len(rep.Problems), maxAuditFaults)], ProblemCount: len(rep.Problems),
		VerifiedAt: time.Now().UTC()}
	if out.Problems == nil {
		out.Problems = []audit.Problem{}
	}
	if !page.Complete() {
		out.Next = page.Last + 1
	}
	for _, c := range rep.Chains {
		role, _, _ := audit.SplitChain(c.Chain)
		ch := AuditChain{Chain: c.Chain, Writer: c.Identity, Role: role, Records: c.Records, First: c.First, Last: c.Last, LastStreamSeq: c.LastStreamSeq, OK: true}
		if p, bad := rep.FirstProblem(c.Chain); bad {
			ch.OK, ch.Fault = false, &p
		}
		out.Chains = append(out.Chains, ch)
	}
	writeJSON(w, http.StatusOK, out)
}
