package stack

import (
	"context"
	"maps"
	"slices"

	"github.com/mcpbus/mcpbus/libs/ops"
	"github.com/mcpbus/mcpbus/libs/service"
)

// ReadyChecks are the readiness checks of the whole process (the /readyz of
// `mcpbus up --metrics-addr`): every service is ready, every connection to
// the embedded NATS — each service's own and the stack's — is up, and ctx
// (the process's life) has not ended.
func (s *Stack) ReadyChecks(ctx context.Context) []ops.Check {
	var checks []ops.Check
	for _, name := range slices.Sorted(maps.Keys(s.Services)) {
		checks = append(checks, ops.Ready(name, s.Services[name].Ready()))
		if c, ok := s.Services[name].(service.Checker); ok {
			for _, ch := range c.Checks() {
				checks = append(checks, ops.Check{Name: name + " " + ch.Name, Err: ch.Err})
			}
		}
	}
	for _, nc := range s.conns {
		checks = append(checks, ops.NATS("nats "+nc.Opts.Name, nc))
	}
	return append(checks, ops.Running(ctx))
}
