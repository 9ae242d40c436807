package stack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/libs/access"
	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/approvals"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
)

// agent is an agent identity and the tools it may call.
type agent struct {
	ID          access.Identity `json:"-"`
	Name        string          `json:"name"`
	Allow       []string        `json:"allow"`
	MaxInflight int             `json:"max_inflight,omitempty"`
	Rate        *model.KeyRate  `json:"rate,omitempty"`
	Created     time.Time       `json:"created"`
}

func (a agent) record() model.AgentRecord {
	return model.AgentRecord{Name: a.Name, Allow: a.Allow, MaxInflight: a.MaxInflight, Rate: a.Rate}
}

// AddAgent makes an agent identity allowed the tools matching allow (globs
// on <server>__<tool>; none: every tool) and lets it connect at once. The
// seed is written to a 0600 file whose path model.Agent gives.
func (s *Stack) AddAgent(name string, allow []string) (model.Agent, error) {
	return s.CreateAgent(model.AgentCreateRequest{Name: name, Allow: allow})
}

// CreateAgent is AddAgent with every setting of the request.
func (s *Stack) CreateAgent(in model.AgentCreateRequest) (model.Agent, error) {
	name, allow := in.Name, in.Allow
	if s.Identities == nil {
		return model.Agent{}, apierr.New(apierr.Conflict, "the bus runs without authentication (--insecure-bus): there are no identities to make")
	}
	if err := model.ValidateAgentName(name); err != nil {
		return model.Agent{}, err
	}
	if in.MaxInflight < 0 {
		return model.Agent{}, apierr.Invalid("max_inflight", "max_inflight must be 0 (the runner's default) or more")
	}
	if in.Rate != nil {
		if err := in.Rate.Check(); err != nil {
			return model.Agent{}, err
		}
	}
	if len(allow) == 0 {
		allow = []string{"*"}
	}
	s.agMu.Lock()
	defer s.agMu.Unlock()
	if _, ok := s.agents[name]; ok {
		return model.Agent{}, apierr.Newf(apierr.Conflict, "agent %s exists; revoke it first", name)
	}
	if s.unpurged[name] {
		// The new agent would be the same principal, agent:<name>: it
		// would call upstream with the revoked one's tokens and use its
		// approvals. Try the purge again; until it is done the name waits.
		if err := s.purgeAgent(name, principal.Operator().ID); err != nil {
			return model.Agent{}, apierr.Wrap(apierr.Conflict, fmt.Sprintf("agent %s was revoked, and what it left is not removed yet, "+
				"so a new agent of the name would inherit it; the name is free once it is (mcpbus agents revoke %s tries again)", name, name), err)
		}
	}
	id, err := s.Identities.Ensure(access.AgentIdentity(name), access.Agent)
	if err != nil {
		return model.Agent{}, err
	}
	a := agent{ID: id, Name: name, Allow: slices.Clone(allow), MaxInflight: in.MaxInflight, Rate: in.Rate, Created: time.Now().UTC()}
	meta, _ := json.Marshal(a)
	if err := os.WriteFile(s.metaFile(name), meta, 0o600); err != nil {
		return model.Agent{}, fmt.Errorf("agent %s: %w", name, err)
	}
	// The runners learn what it may do before it can connect.
	if err := s.putAgentRecord(a); err != nil {
		_ = os.Remove(s.metaFile(name))
		return model.Agent{}, err
	}
	s.agents[name] = a
	if err := s.applyUsers(); err != nil {
		return model.Agent{}, err
	}
	return s.info(a), nil
}

// RevokeAgent removes an agent: its seed no longer connects, its open
// connections are closed, and what is kept for its principal (agent:<name>)
// goes: its own upstream credentials (per-principal servers) and its calls
// held for approval, pending or decided. An agent made later with the name
// is the same principal and would otherwise inherit them. When that purge
// fails the agent is revoked all the same, the error says so, and the name
// is refused to CreateAgent until a purge succeeds (revoking the name again,
// or the create, tries again; the mark survives a restart).
func (s *Stack) RevokeAgent(name string) error { return s.revokeAgent(name, principal.Operator().ID) }

// revokeAgent is RevokeAgent asked for by actor, who is named as the one
// who denied the agent's pending held calls (the audit trail's
// approval_decided).
func (s *Stack) revokeAgent(name, actor string) error {
	s.agMu.Lock()
	defer s.agMu.Unlock()
	if _, ok := s.agents[name]; !ok {
		if !s.unpurged[name] {
			return apierr.Newf(apierr.NotFound, "no agent %s", name)
		}
		return s.purgeAgent(name, actor) // revoked before; its purge was not done
	}
	// Marked before anything goes, so neither a failure below nor a crash
	// lets the name be given again with the old agent's leftovers.
	s.unpurged[name] = true
	if err := os.WriteFile(s.purgeFile(name), nil, 0o600); err != nil {
		s.log.Warn("the pending purge of a revoked agent is not marked on disk: a restart before it is done forgets it", "agent", name, "error", err)
	}
	delete(s.agents, name)
	_ = os.Remove(s.metaFile(name))
	if err := s.deleteAgentRecord(name); err != nil {
		s.log.Warn("agent record not deleted; the agent is disconnected and its seed removed all the same", "agent", name, "error", err)
	}
	_ = os.Remove(s.Identities.SeedFile(access.AgentIdentity(name)))
	if err := s.applyUsers(); err != nil {
		return err
	}
	return s.purgeAgent(name, actor)
}

// agentPurgeTimeout bounds the purge of a revoked agent's leftovers.
const agentPurgeTimeout = 30 * time.Second

// purgeAgent deletes the per-principal credentials of the revoked agent
// name (cred.forget) and withdraws its held calls (mcp_approvals: a pending
// one is denied by actor, every record of it deleted), then forgets the
// pending mark. The caller holds agMu.
func (s *Stack) purgeAgent(name, actor string) error {
	who := principal.KindAgent + ":" + name
	ctx, cancel := context.WithTimeout(context.Background(), agentPurgeTimeout)
	defer cancel()
	var errs []error
	if held, err := s.heldCalls(ctx); err != nil && !errors.Is(err, approvals.ErrNoHeldCalls) {
		errs = append(errs, fmt.Errorf("its held calls: %w", err))
	} else if held != nil {
		n, err := held.ForgetCallsOf(ctx, who, actor, "the agent that made it was revoked")
		if err != nil {
			errs = append(errs, fmt.Errorf("its held calls: %w", err))
		} else if n > 0 {
			s.log.Info("held calls of a revoked agent withdrawn", "agent", name, "calls", n)
		}
	}
	if out, err := credclient.New(s.hostNC, s.prefix).Forget(ctx, who); err != nil {
		errs = append(errs, fmt.Errorf("its own upstream credentials: %w", err))
	} else if out.Removed > 0 {
		s.log.Info("upstream credentials of a revoked agent deleted", "agent", name, "records", out.Removed)
	}
	if err := errors.Join(errs...); err != nil {
		s.log.Warn("a revoked agent's leftovers are not removed: its name is refused until they are", "agent", name, "error", err)
		return apierr.Wrap(apierr.ServiceUnavailable, fmt.Sprintf("agent %s is revoked (disconnected, its seed and record removed), but not all it left could be removed (%v); "+
			"its name cannot be given to a new agent until it is: run mcpbus agents revoke %s again", name, err, name), err)
	}
	delete(s.unpurged, name)
	if err := os.Remove(s.purgeFile(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Warn("the done purge of a revoked agent is still marked on disk: after a restart its name waits for another purge", "agent", name, "error", err)
	}
	return nil
}

// heldCalls is the gateway's store of held calls, whose decisions go to its
// audit trail (set by Start); without a gateway, it binds the held calls'
// bucket once it exists (the chat or a runner makes it), and its denials
// are only logged: approvals.ErrNoHeldCalls until then.
func (s *Stack) heldCalls(ctx context.Context) (*approvals.Store, error) {
	if s.held != nil {
		return s.held, nil
	}
	js, err := jetstream.New(s.hostNC)
	if err != nil {
		return nil, err
	}
	held, err := approvals.BindHeld(ctx, js, s.log)
	if err != nil {
		return nil, err
	}
	s.held = held
	return held, nil
}

// purgeFile marks, in the identity directory, a revoked agent whose
// leftovers are not removed yet.
func (s *Stack) purgeFile(name string) string {
	return filepath.Join(s.Identities.Dir(), access.AgentIdentity(name)+".purge")
}

// Agents lists the agents.
func (s *Stack) Agents() []model.Agent {
	s.agMu.Lock()
	defer s.agMu.Unlock()
	var out []model.Agent
	for _, a := range s.agents {
		out = append(out, s.info(a))
	}
	slices.SortFunc(out, func(a, b model.Agent) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (s *Stack) info(a agent) model.Agent {
	return model.Agent{Name: a.Name, Allow: a.Allow, MaxInflight: a.MaxInflight, Rate: a.Rate, Created: a.Created,
		SeedFile: s.Identities.SeedFile(access.AgentIdentity(a.Name)), InboxPrefix: a.ID.Inbox(),
		SubjectPrefix: bus.NewSubjects(s.prefix).ForAgent(a.Name).Prefix,
		Subjects:      access.AgentSubjects(s.prefix, a.Name, a.Allow)}
}

func (s *Stack) metaFile(name string) string {
	return filepath.Join(s.Identities.Dir(), access.AgentIdentity(name)+".json")
}

// loadAgents reads the agents kept in the identity directory.
func (s *Stack) loadAgents() error {
	files, err := filepath.Glob(filepath.Join(s.Identities.Dir(), access.AgentIdentityPrefix+"*.json"))
	if err != nil {
		return err
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("agent %s: %w", f, err)
		}
		var a agent
		if err := json.Unmarshal(data, &a); err != nil {
			return fmt.Errorf("agent %s: %w", f, err)
		}
		if a.ID, err = s.Identities.Ensure(access.AgentIdentity(a.Name), access.Agent); err != nil {
			return err
		}
		s.agents[a.Name] = a
	}
	marks, err := filepath.Glob(filepath.Join(s.Identities.Dir(), access.AgentIdentityPrefix+"*.purge"))
	if err != nil {
		return err
	}
	for _, f := range marks {
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), access.AgentIdentityPrefix), ".purge")
		s.unpurged[name] = true
	}
	return nil
}

// users are the server's users: every role's identity and every agent.
func (s *Stack) users() ([]*server.NkeyUser, error) {
	users := append([]*server.NkeyUser(nil), s.extra...)
	for _, role := range access.ServiceRoles() {
		u, err := access.User(s.ids[role], s.prefix)
		if err != nil {
			return nil, err
		}
		users = append(users, u)
	}
	for _, a := range s.agents {
		u, err := access.AgentUser(a.ID, s.prefix, a.Name, a.Allow)
		if err != nil {
			return nil, err
		}
		users = append(users, u)
	}
	return users, nil
}

// applyUsers gives the running server the current users.
func (s *Stack) applyUsers() error {
	users, err := s.users()
	if err != nil {
		return err
	}
	return s.NATS.SetUsers(users)
}

// serveAgents answers mcp.v1.agents.{create,list,revoke} (operator only,
// by the permission table) until the stack closes.
func (s *Stack) serveAgents(nc *nats.Conn) error {
	subj := bus.NewSubjects(s.prefix)
	handlers := map[string]bus.HandlerFunc{
		"create": func(_ context.Context, req micro.Request) (any, error) {
			var in model.AgentCreateRequest
			if err := bus.Decode(req.Data(), &in); err != nil {
				return nil, err
			}
			a, err := s.CreateAgent(in)
			if err == nil {
				s.log.Info("agent identity created", "agent", a.Name, "allow", a.Allow)
			}
			return a, err
		},
		"list": func(_ context.Context, req micro.Request) (any, error) {
			if err := bus.Decode(req.Data(), &struct{}{}); err != nil {
				return nil, err
			}
			return model.AgentList{Agents: s.Agents()}, nil
		},
		"revoke": func(_ context.Context, req micro.Request) (any, error) {
			var in model.AgentRef
			if err := bus.Decode(req.Data(), &in); err != nil {
				return nil, err
			}
			// Who asked: the console's caller (the gateway sends its
			// principal), else the operator. Only they may send here.
			actor, err := principal.FromHeader(nats.Header(req.Headers()))
			if err != nil {
				return nil, err
			}
			if err := s.revokeAgent(in.Name, actor.ID); err != nil {
				return nil, err
			}
			s.log.Info("agent identity revoked", "agent", in.Name)
			return in, nil
		},
	}
	cfg := bus.ServiceConfig{Name: "mcpbus-agents", Version: "0.1.0", Description: "mcpbus up: agent identities of the embedded NATS server"}
	for _, verb := range []string{"create", "list", "revoke"} {
		cfg.Endpoints = append(cfg.Endpoints, bus.Endpoint{Name: "agents-" + verb, Subject: subj.Service("agents", verb),
			Handler: bus.JSONHandler(s.log, handlers[verb])})
	}
	_, err := bus.StartService(nc, cfg)
	return err
}

// agentRecordTimeout bounds one write of an agent's record.
const agentRecordTimeout = 10 * time.Second

// syncAgentRecords makes KV mcp_agents hold exactly the agents of the
// identity directory (an agent revoked while the stack was down loses its
// record too).
func (s *Stack) syncAgentRecords(ctx context.Context, js jetstream.JetStream) error {
	kv, err := bus.EnsureKV(ctx, js, bus.AgentsKV(), 1, s.log)
	if err != nil {
		return fmt.Errorf("agents: %w", err)
	}
	s.agMu.Lock()
	defer s.agMu.Unlock()
	// Agent records are written while an operator waits: ride out a leader
	// election (bus.RetryKV) within agentRecordTimeout.
	s.agentsKV = bus.RetryKV(kv)
	for _, a := range s.agents {
		if err := s.putAgentRecord(a); err != nil {
			return err
		}
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return fmt.Errorf("agents: listing records: %w", err)
	}
	for k := range keys.Keys() {
		if _, ok := s.agents[k]; !ok {
			if err := s.deleteAgentRecord(k); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *Stack) putAgentRecord(a agent) error {
	if s.agentsKV == nil {
		return nil // an insecure bus has no agents
	}
	data, err := json.Marshal(a.record())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), agentRecordTimeout)
	defer cancel()
	if _, err := s.agentsKV.Put(ctx, a.Name, data); err != nil {
		return apierr.Wrap(apierr.ServiceUnavailable, "agent "+a.Name+": storing its record for the runners", err)
	}
	return nil
}

func (s *Stack) deleteAgentRecord(name string) error {
	if s.agentsKV == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), agentRecordTimeout)
	defer cancel()
	if err := s.agentsKV.Delete(ctx, name); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("agent %s: deleting its record: %w", name, err)
	}
	return nil
}
