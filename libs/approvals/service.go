package approvals

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
)

// Verbs of mcp.v1.approvals.* (the CLI's); the REST API serves the same
// operations under /api/v1/approvals.
const (
	VerbList     = "list"
	VerbDecide   = "decide"
	VerbRulesGet = "rules-get"
	VerbRulesPut = "rules-put"
)

// AddEndpoints adds mcp.v1.approvals.{list,decide,rules-get,rules-put} to
// the gateway's micro service (any instance answers: the state is in KV).
// Only the operator and the gateways may publish there (libs/access), so a
// request without a principal header is the operator's (admin).
func (s *Store) AddEndpoints(svc micro.Service, prefix string, log *slog.Logger) error {
	if log == nil {
		log = s.log
	}
	caller := func(req micro.Request) (principal.Principal, error) {
		return principal.FromHeader(nats.Header(req.Headers()))
	}
	handlers := map[string]bus.HandlerFunc{
		VerbList: func(ctx context.Context, req micro.Request) (any, error) {
			p, err := caller(req)
			if err != nil {
				return nil, err
			}
			calls, err := s.List(ctx, p.ID, p.Admin)
			return model.ApprovalsListReply{Calls: calls}, err
		},
		VerbDecide: func(ctx context.Context, req micro.Request) (any, error) {
			p, err := caller(req)
			if err != nil {
				return nil, err
			}
			var in model.ApprovalDecideRequest
			if err := bus.Decode(req.Data(), &in); err != nil {
				return nil, err
			}
			h, err := s.Decide(ctx, in, p.ID, p.Admin, false)
			if err == nil {
				log.Info("held call decided", "id", h.ID, "tool", h.Tool, "decision", h.Decision, "by", p.ID)
			}
			return h, err
		},
		VerbRulesGet: func(ctx context.Context, req micro.Request) (any, error) {
			return s.Rules(), nil
		},
		VerbRulesPut: func(ctx context.Context, req micro.Request) (any, error) {
			p, err := caller(req)
			if err != nil {
				return nil, err
			}
			if !p.Admin {
				return nil, errAdminOnly
			}
			var in model.ApprovalRules
			if err := bus.Decode(req.Data(), &in); err != nil {
				return nil, err
			}
			out, err := s.PutRules(principal.With(ctx, p), in)
			if err == nil {
				log.Info("approval rules replaced", "rules", len(out.Rules), "default", out.Default, "by", p.ID)
			}
			return out, err
		},
	}
	subj := bus.NewSubjects(prefix)
	for _, verb := range []string{VerbList, VerbDecide, VerbRulesGet, VerbRulesPut} {
		// Added to a service bus.StartService did not make, so refused here:
		// a reply that is not an inbox would have the gateway publish with
		// its rights (mcp_apikeys, mcp_approvals) where the caller may not.
		if err := svc.AddEndpoint("approvals-"+verb, bus.RefuseReply(log, bus.JSONHandler(log, handlers[verb])),
			micro.WithEndpointSubject(subj.Service("approvals", verb))); err != nil {
			return fmt.Errorf("gateway: approvals.%s endpoint: %w", verb, err)
		}
	}
	return nil
}

// errAdminOnly refuses a rules change by anyone but an admin.
var errAdminOnly = apierr.New(apierr.Unauthorized, "only an admin may change the approval rules")
