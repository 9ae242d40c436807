package mcpserver

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// agentPoll is how often an agent's aggregate lists its tools again when no
// status event of its servers has asked it to sooner.
const agentPoll = 5 * time.Second

// followAgent keeps the aggregate of an agent (Options.Agent) in step
// through what an agent may read: its own tools.list (only the tools its
// globs match, on its own subjects), again every agentPoll and whenever a
// status event of one of its servers arrives. An agent has no JetStream, so
// the catalog buckets are not for it. ready is closed after the first list.
func (a *Aggregator) followAgent(ctx context.Context, ready chan<- struct{}) {
	readyOnce := sync.OnceFunc(func() { close(ready) })
	defer readyOnce()
	subj := bus.NewSubjects(a.opts.Prefix)
	kick := make(chan struct{}, 1)
	subs := map[string]*nats.Subscription{}
	defer func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}()
	tick := time.NewTicker(agentPoll)
	defer tick.Stop()
	for {
		lctx, cancel := context.WithTimeout(ctx, a.opts.RPCTimeout)
		tools, err := a.client.ListTools(lctx, "")
		cancel()
		if err != nil {
			a.log.Warn("listing the agent's tools", "agent", a.opts.Agent, "error", err)
		} else {
			catalogs, status := map[string]model.Catalog{}, map[string]model.Status{}
			for _, t := range tools {
				c := catalogs[t.Server]
				c.Server, c.Tools = t.Server, append(c.Tools, t)
				catalogs[t.Server] = c
				status[t.Server] = model.Status{Server: t.Server, State: model.StateRunning}
			}
			a.applyStatus(status, 0)
			a.applyCatalogs(catalogs, 0) // no bucket: nothing to catch up with (catchup.go)
			readyOnce()
			for slug := range catalogs {
				if subs[slug] != nil {
					continue
				}
				s, err := a.nc.Subscribe(subj.Event("status", slug), func(*nats.Msg) {
					select {
					case kick <- struct{}{}:
					default:
					}
				})
				if err == nil {
					subs[slug] = s
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-kick:
		}
	}
}
