package runner

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/time/rate"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
)

// admitted is callerOf for the requests an agent's rate counts (calls, rpc,
// tools.list, tools.search; not cancellations): the caller, or the error to
// answer when it has no record or is past its rate (admit).
func (r *Runner) admitted(subject string) (caller, string, error) {
	c, plain, err := r.callerOf(subject)
	if err == nil {
		err = r.admit(c)
	}
	return c, plain, err
}

// agentLimiter is one agent's token bucket at this runner, made for rate.
type agentLimiter struct {
	rate model.KeyRate
	lim  *rate.Limiter
}

// admit takes one request of c from its rate at this runner (its record's,
// else model.DefaultAgentRate) and refuses it past that, RATE_LIMITED,
// before it leaves any event: each call of an agent is a record of the
// audit stream, whose oldest records go once it is full, and one agent's
// thousands of calls a second would push months of them out in minutes.
// Services and the operator are bounded by their own front doors.
func (r *Runner) admit(c caller) error {
	if c.agent == "" {
		return nil
	}
	want := model.DefaultAgentRate
	if c.record.Rate != nil {
		want = *c.record.Rate
	}
	v, _ := r.agentRates.Load(c.agent)
	l, _ := v.(*agentLimiter)
	if l == nil || l.rate != want { // first request, or a new rate in the record
		l = &agentLimiter{rate: want, lim: rate.NewLimiter(rate.Limit(want.RPS), want.Burst)}
		r.agentRates.Store(c.agent, l)
	}
	now := time.Now()
	res := l.lim.ReserveN(now, 1)
	if d := res.DelayFrom(now); !res.OK() || d > 0 {
		res.CancelAt(now) // refused: the token goes back
		return apierr.Newf(apierr.RateLimited, "agent %s is past its rate of %g requests a second (bursts of %d) at runner %s; retry after %d ms",
			c.agent, want.RPS, want.Burst, r.opts.ID, max(d.Milliseconds(), 1))
	}
	return nil
}

// forgetRates makes h, the handler of the agents' records, drop the token
// bucket of an agent whose record goes: agents come and go (one per job,
// say) for the life of a runner, which would otherwise keep one bucket for
// every agent it ever served.
func (r *Runner) forgetRates(h bus.KVHandler) bus.KVHandler {
	snapshot, update := h.Snapshot, h.Update
	h.Snapshot = func(entries map[string]jetstream.KeyValueEntry) {
		snapshot(entries)
		r.agentRates.Range(func(name, _ any) bool {
			if _, ok := entries[name.(string)]; !ok {
				r.agentRates.Delete(name)
			}
			return true
		})
		// The watch started over (a reconnect, a new leader): a record
		// deleted meanwhile comes as no delete, only as its absence here,
		// and one deleted and made again (the agent revoked, another made
		// with its name, the same principal) as nothing at all. Every
		// agent's upstream sessions go, so none is used by a namesake; the
		// agents still recorded open theirs again on their next call.
		r.dropAgentSessionsWhere(func(string) bool { return true })
	}
	h.Update = func(e jetstream.KeyValueEntry) {
		update(e)
		if e.Operation() != jetstream.KeyValuePut {
			r.agentRates.Delete(e.Key())
			r.dropAgentSessions(e.Key())
		}
	}
	return h
}

// dropAgentSessions closes the upstream sessions agent name has on the
// per-principal servers here: the agent was revoked, and an agent made again
// with the name is the same principal (agent:<name>). Its sessions leave the
// map before this returns, on the goroutine that follows the agents'
// records: the new agent's record comes after the delete on it, and its
// calls are refused until it has, so none of them finds the revoked one's
// session (opened with its credentials). The closing itself goes on
// meanwhile.
func (r *Runner) dropAgentSessions(name string) {
	r.dropAgentSessionsWhere(func(n string) bool { return n == name })
}

// dropAgentSessionsWhere is dropAgentSessions of every agent whose name
// gone accepts.
func (r *Runner) dropAgentSessionsWhere(gone func(name string) bool) {
	r.mu.Lock()
	servers := slices.Collect(maps.Values(r.servers))
	r.mu.Unlock()
	prefix := principal.KindAgent + ":"
	for _, s := range servers {
		out := s.takePrincipals(func(who string) bool {
			name, ok := strings.CutPrefix(who, prefix)
			return ok && gone(name)
		})
		if len(out) > 0 {
			s.log.Info("a revoked agent's upstream sessions are closed", "sessions", len(out))
			go s.closeAll(out)
		}
	}
}
