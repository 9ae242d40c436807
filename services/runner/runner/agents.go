package runner

import (
	"bytes"
	"cmp"
	"encoding/json"
	"strings"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/libs/access"
	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// An agent requests under <prefix>.agent.<name>, where the bus lets only that
// agent publish; the runner learns the caller from the subject and checks
// the request against the agent's record (KV mcp_agents): the tools its
// globs match, and its share of a server's calls.

// caller is who sent a request: an agent, or "" for the services and the
// operator (whose rights the bus's permission table bounds).
type caller struct {
	agent  string
	record model.AgentRecord
}

// callerOf reads the caller from subject and returns the subject it stands
// for; an agent without a record is refused.
func (r *Runner) callerOf(subject string) (caller, string, error) {
	name, plain, ok := r.subj.AgentOf(subject)
	if !ok {
		return caller{}, subject, nil
	}
	r.mu.Lock()
	rec, found := r.agents[name]
	r.mu.Unlock()
	if !found {
		return caller{}, plain, apierr.Newf(apierr.Unauthorized, "agent %s has no record on this bus (revoked, or made by another host)", name)
	}
	return caller{agent: name, record: rec}, plain, nil
}

// ownReplies makes each of endpoints drop an agent's request whose reply
// subject is not in the agent's own inbox (_I.agent-<name>.…): NATS lets a
// publisher name any reply subject, and the runner may publish into every
// inbox, so an agent could otherwise have the runner send its reply (and,
// through the header subjects checked against the reply, its progress and
// its server's requests) to another agent. Nothing is answered: an error
// reply would go there too.
func (r *Runner) ownReplies(endpoints []bus.Endpoint) []bus.Endpoint {
	for i, e := range endpoints {
		h := e.Handler
		endpoints[i].Handler = micro.HandlerFunc(func(req micro.Request) {
			if name, _, ok := r.subj.AgentOf(req.Subject()); ok && req.Reply() != "" &&
				!strings.HasPrefix(req.Reply(), access.Inbox(access.AgentIdentity(name))+".") {
				r.log.Warn("request refused: an agent's reply subject is not in its own inbox", "agent", name, "subject", req.Subject(), "reply", req.Reply())
				return
			}
			h.Handle(req)
		})
	}
	return endpoints
}

// label names the caller in call events and logs ("agent:<name>"), "" for services.
func (c caller) label() string {
	if c.agent == "" {
		return ""
	}
	return "agent:" + c.agent
}

// allows reports whether c may call tool of server.
func (c caller) allows(server string, tool *mcp.Tool) bool {
	return c.agent == "" || c.record.Allows(model.ToolNames(model.NamespacedName(server, tool.Name), server, tool.Name)...)
}

// allowsServer reports whether c may reach server at all (rpc, cancel).
func (c caller) allowsServer(server string) bool {
	return c.agent == "" || c.record.AllowsServer(server)
}

// inflightKey keys a call in flight by its caller and request id, so that a
// cancellation reaches only the caller's own calls.
func (c caller) inflightKey(reqID string) string {
	if c.agent == "" {
		return reqID
	}
	return c.agent + "\x00" + reqID
}

// visibleTools are the tools of list c may see, their subjects the ones c
// calls them on.
func (r *Runner) visibleTools(c caller, list []model.Tool) []model.Tool {
	if c.agent == "" {
		return list
	}
	own := r.subj.ForAgent(c.agent).Prefix + "."
	var out []model.Tool
	for _, t := range list {
		if !c.record.Allows(model.ToolNames(t.Name, t.Server, t.Tool)...) {
			continue
		}
		t.Subject = own + strings.TrimPrefix(t.Subject, r.subj.Prefix+".")
		out = append(out, t)
	}
	return out
}

// takeShare counts one more call or rpc request of c at s and reports whether it is within
// c's share (the agent's max_inflight, else the runner's AgentMaxInflight);
// release undoes it. Services and the operator have no share of their own:
// the server's max_inflight bounds them.
func (s *server) takeShare(c caller) (release func(), err error) {
	if c.agent == "" {
		return func() {}, nil
	}
	v, _ := s.shares.LoadOrStore(c.agent, new(atomic.Int64))
	n := v.(*atomic.Int64)
	max := c.record.MaxInflight
	if max <= 0 {
		max = s.r.opts.AgentMaxInflight
	}
	if max <= 0 {
		s.mu.RLock()
		max = maxInflight(s.cfg, s.r.opts.MaxInflight) / 4
		s.mu.RUnlock()
		max = cmp.Or(max, 1)
	}
	if n.Add(1) > int64(max) {
		n.Add(-1)
		return nil, apierr.Newf(apierr.ServiceUnavailable, "agent %s already runs %d requests (calls and rpc) at server %s, its share (max_inflight); try again shortly", c.agent, max, s.slug)
	}
	return func() { n.Add(-1) }, nil
}

// publishAgentStatus sends st again to each agent whose globs name its
// server, under the agent's own prefix (<prefix>.agent.<name>.events.status.<server>,
// live only), naming only the tools that agent may call and without the
// server's call and error counts: the status event lists every tool of the
// server, which an agent granted some of them is not to learn of, and counts
// every caller's calls, which are not the agent's. A status that differs
// from the last one sent only in those counts (and its time) is not sent:
// a busy server's counts are published every few seconds (tick), and each
// would cost a copy per agent, of which none has anything new.
func (r *Runner) publishAgentStatus(st model.Status) {
	type target struct {
		name   string
		record model.AgentRecord
	}
	r.mu.Lock()
	var to []target
	for name, rec := range r.agents {
		if rec.AllowsServer(st.Server) {
			to = append(to, target{name, rec})
		}
	}
	r.mu.Unlock()
	if len(to) == 0 {
		return
	}
	seen := st
	seen.Calls, seen.Errors, seen.UpdatedAt = 0, 0, time.Time{}
	key, _ := json.Marshal(seen)
	r.mu.Lock()
	same := bytes.Equal(r.agentStatus[st.Server], key)
	if !same {
		if r.agentStatus == nil {
			r.agentStatus = map[string][]byte{}
		}
		r.agentStatus[st.Server] = key
	}
	r.mu.Unlock()
	if same {
		return
	}
	for _, a := range to {
		own := st
		own.Tools, own.Calls, own.Errors = nil, 0, 0
		for _, tool := range st.Tools {
			if a.record.Allows(model.ToolNames(model.NamespacedName(st.Server, tool), st.Server, tool)...) {
				own.Tools = append(own.Tools, tool)
			}
		}
		data, _ := json.Marshal(own)
		if err := r.nc.Publish(r.subj.ForAgent(a.name).Event("status", st.Server), data); err != nil {
			r.log.Warn("publishing an agent's status event failed", "agent", a.name, "server", st.Server, "error", err)
		}
	}
}
