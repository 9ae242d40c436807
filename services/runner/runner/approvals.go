package runner

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/approvals"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
)

// Approvals on the bus (issue 30 item 2): every call that reaches a runner —
// an agent's, the chat's, serve-stdio's, the CLI's, a task's, the gateway's —
// is checked against the one set of approval rules (libs/approvals) for the
// principal it is made for: the agent its subject names, else the one in
// the Mcpbus-Principal header (which only the gateway, the chat and the
// operator may send), else the operator. The rules come from a KV watch;
// without any, a call pays one atomic load.

// approvalSetup bounds reading the rules at start.
const approvalSetup = 30 * time.Second

// openApprovals opens the rules and the held calls, followed until ctx ends.
func (r *Runner) openApprovals(ctx context.Context) error {
	setup, cancel := context.WithTimeout(ctx, approvalSetup)
	defer cancel()
	st, err := approvals.Open(ctx, setup, r.nc, approvals.Options{Replicas: r.opts.Replicas, Logger: r.log})
	if err != nil {
		return fmt.Errorf("runner: approval rules: %w", err)
	}
	r.approvals = st
	return nil
}

// approve applies the rules to a call of token with args: nil lets it run.
// A held call waits within the caller's deadline (approvalWait); the time it
// waited is taken off the deadline the call itself gets (Mcp-Timeout-Ms).
func (s *server) approve(ctx context.Context, c caller, h nats.Header, token string, args []byte) error {
	st := s.r.approvals
	if st == nil || !st.Enforcing() {
		return nil
	}
	who, err := s.r.callerPrincipal(c, h)
	if err != nil {
		return err
	}
	if who == "" {
		who = principal.KindOperator
	}
	start := time.Now()
	name, serverTool := s.namespaced(token)
	err = st.Gate(ctx, approvals.Call{Principal: who, Server: s.slug, Tool: name, ServerTool: serverTool, Arguments: args}, s.approvalWait(ctx, h))
	if ct := bus.CallerTimeout(h); ct > 0 {
		left := max(ct-time.Since(start), time.Millisecond)
		h.Set(bus.HeaderTimeout, strconv.FormatInt(left.Milliseconds(), 10))
	}
	return err
}

// namespaced is the <server>__<tool> name of token, as the gateway's
// catalog names it (so both find the same held call), and the tool's own
// name (rules may name either; model.ToolNames).
func (s *server) namespaced(token string) (name, tool string) {
	s.mu.RLock()
	t, ok := s.tools[token]
	s.mu.RUnlock()
	if ok {
		return model.NamespacedName(s.slug, t.Name), t.Name
	}
	return model.NamespacedName(s.slug, token), token
}

// knows reports whether the server's tools include the one token names.
func (s *server) knows(token string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.tools[token]
	return ok
}

// approvalWait is how long a held call may wait here: until shortly before
// the caller gives up (its Mcp-Timeout-Ms, a task's deadline), so that it
// hears that the call is held rather than a timeout; without either, the
// server's call timeout.
func (s *server) approvalWait(ctx context.Context, h nats.Header) time.Duration {
	wait := bus.CallerTimeout(h)
	if dl, ok := ctx.Deadline(); ok && (wait == 0 || time.Until(dl) < wait) {
		wait = time.Until(dl)
	}
	if wait == 0 {
		s.mu.RLock()
		cfg := s.cfg
		s.mu.RUnlock()
		wait = s.r.opts.CallTimeout
		if cfg != nil {
			wait = cfg.Runtime.CallTimeout.Or(wait)
		}
	}
	// The answer must reach the caller before its deadline does.
	return wait - min(max(wait/10, 50*time.Millisecond), 2*time.Second)
}
