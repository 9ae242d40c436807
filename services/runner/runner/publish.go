package runner

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/bus"

	"github.com/mcpbus/mcpbus/libs/model"
)

// publishTimeout bounds a status or catalog write's first try: short,
// because a runner cut off from NATS must not hold a server's lifecycle
// goroutine for long (a transient failure is retried in the background,
// see latestWriter).
func (r *Runner) publishTimeout() time.Duration { return min(2*time.Second, r.opts.LeaseTTL/3) }

// publishStatus records st in KV mcp_status and emits it on events.status.<server>
// (and to the agents its server's tools are granted to, publishAgentStatus).
func (r *Runner) publishStatus(st model.Status) {
	r.mu.Lock()
	r.status[st.Server] = st
	r.mu.Unlock()
	data, _ := json.Marshal(st)
	r.statusW.Put(st.Server, data, r.publishTimeout())
	ctx, cancel := context.WithTimeout(context.Background(), r.publishTimeout())
	defer cancel()
	if _, err := r.js.Publish(ctx, r.subj.Event("status", st.Server), data); err != nil {
		r.log.Warn("publishing status event failed", "server", st.Server, "error", err)
	}
	r.publishAgentStatus(st)
}

// forgetStatus removes a deleted server's status.
func (r *Runner) forgetStatus(slug string) {
	r.mu.Lock()
	delete(r.status, slug)
	delete(r.agentStatus, slug)
	r.mu.Unlock()
	r.statusW.Delete(slug, r.publishTimeout())
}

// callEventDelay is how long a call event may wait to be published with
// others (see bus.Batcher); callEventBatch publishes at once.
const (
	callEventDelay = 5 * time.Millisecond
	callEventBatch = 256
)

// publishCall emits the audit event of one call. Core publish into the
// stream's subject, batched: the call path never waits for a JetStream ack,
// and the stream stores events in bursts after the replies went out.
func (r *Runner) publishCall(ctx context.Context, ev model.CallEvent) {
	data, _ := json.Marshal(ev)
	msg := &nats.Msg{Subject: r.subj.Event("call", ev.Server), Data: data, Header: nats.Header{}}
	if ev.RequestID != "" {
		msg.Header.Set(bus.HeaderRequestID, ev.RequestID)
	}
	bus.InjectTrace(ctx, msg.Header)
	r.callEvents.Publish(msg)
	r.opts.Audit.Append(msg.Subject, data) // sealed and stored off the call's path
	// An agent follows the events of its own calls, under its own prefix:
	// events.call.<server> carries every caller's (their principals and
	// error texts), which are not the agent's to see.
	if agent, ok := strings.CutPrefix(ev.Caller, "agent:"); ok {
		own := &nats.Msg{Subject: r.subj.ForAgent(agent).Event("call", ev.Server), Data: data, Header: msg.Header}
		r.callEvents.Publish(own)
	}
}

// publishCatalog stores the server's tools in KV mcp_tools.
func (s *server) publishCatalog() {
	s.mu.RLock()
	cat := model.Catalog{Server: s.slug, ConfigRevision: s.cfg.Revision, Tools: make([]model.Tool, 0, len(s.tools)), UpdatedAt: time.Now().UTC()}
	for token, t := range s.tools {
		if s.cfg.Tools.Allows(t.Name) && s.withheldLocked(token) == "" { // filtered and withheld tools are absent
			cat.Tools = append(cat.Tools, catalogTool(s.r, s.slug, token, t))
		}
	}
	s.mu.RUnlock()
	sort.Slice(cat.Tools, func(i, j int) bool { return cat.Tools[i].Tool < cat.Tools[j].Tool })
	s.r.mu.Lock()
	s.r.catalog[s.slug] = cat
	s.r.mu.Unlock()
	data, _ := json.Marshal(cat)
	s.r.toolsW.Put(s.slug, data, s.r.publishTimeout())
}

func (s *server) deleteCatalog() {
	s.r.mu.Lock()
	delete(s.r.catalog, s.slug)
	s.r.mu.Unlock()
	s.r.toolsW.Delete(s.slug, s.r.publishTimeout())
}

// catalogTool is the catalog entry of one MCP tool: its namespaced name, its
// subject and its schemas as raw JSON.
func catalogTool(r *Runner, slug, token string, t *mcp.Tool) model.Tool {
	out := model.Tool{
		Name: model.NamespacedName(slug, t.Name), Server: slug, Tool: t.Name,
		Subject: r.subj.Call(slug, token), Title: t.Title, Description: t.Description,
	}
	out.InputSchema = rawJSON(t.InputSchema)
	out.OutputSchema = rawJSON(t.OutputSchema)
	if t.Annotations != nil {
		out.Annotations = rawJSON(t.Annotations)
	}
	return out
}

func rawJSON(v any) json.RawMessage {
	if v == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil || string(b) == "null" {
		return nil
	}
	return b
}

func sortStrings(s []string) { sort.Strings(s) }
