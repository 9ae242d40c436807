package runner

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/mcpbus/mcpbus/libs/model"
)

// meterName is the instrumentation scope of the runner's lifecycle metrics.
const meterName = "github.com/mcpbus/mcpbus/services/runner/runner"

// attrServer is the metric attribute naming a managed server (its slug).
const attrServer = "mcpbus.server"

// Why a server was restarted (the reason attribute of
// mcpbus.runner.server.restarts).
const (
	restartCrash  = "crash"  // its process exited or its start failed: an automatic restart is scheduled
	restartHealth = "health" // it stopped answering pings
	restartManual = "manual" // runtime.restart (`mcpbus restart`)
	restartConfig = "config" // its launch settings changed
)

// lifecycleMetrics are the runner's lifecycle instruments, made once per
// runner from the global meter provider.
type lifecycleMetrics struct {
	meter    metric.Meter
	running  metric.Int64ObservableUpDownCounter
	restarts metric.Int64Counter
	// refused counts the servers' requests of their clients (elicitation,
	// sampling) the runner refused, by reason (targetFor, relay).
	refused metric.Int64Counter
}

func newLifecycleMetrics() lifecycleMetrics {
	m := lifecycleMetrics{meter: otel.Meter(meterName)}
	// Errors only come with invalid names; the no-op instrument stands in.
	m.running, _ = m.meter.Int64ObservableUpDownCounter("mcpbus.runner.servers.running",
		metric.WithUnit("{server}"),
		metric.WithDescription("Managed MCP servers running on this runner (1 per running server, 0 for one idle, starting, stopped or in error)"))
	m.restarts, _ = m.meter.Int64Counter("mcpbus.runner.server.restarts",
		metric.WithUnit("{restart}"),
		metric.WithDescription("Restarts of a managed MCP server, by reason: crash (automatic, scheduled after an exit or a failed start), health, manual, config"))
	m.refused, _ = m.meter.Int64Counter("mcpbus.runner.client_requests.refused",
		metric.WithUnit("{request}"),
		metric.WithDescription("Requests of a managed MCP server to its client (elicitation, sampling) the runner refused, by reason: no_caller (no call or several in flight, or one without a client subject), in_doubt (another principal's call on the session ended unanswered lately), limit (the call's requests past their limits)"))
	return m
}

// countRestart records a restart of s.
func (s *server) countRestart(reason string) {
	s.r.metrics.restarts.Add(context.Background(), 1, metric.WithAttributes(
		attribute.String(attrServer, s.slug), attribute.String("reason", reason)))
}

// countRefusedRequest records a request of s to its client that the runner refused.
func (s *server) countRefusedRequest(reason string) {
	s.r.metrics.refused.Add(context.Background(), 1, metric.WithAttributes(
		attribute.String(attrServer, s.slug), attribute.String("reason", reason)))
}

// observeServers reports mcpbus.runner.servers.running at each collection
// until the returned function is called.
func (r *Runner) observeServers() (stop func()) {
	reg, err := r.metrics.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		r.mu.Lock()
		servers := make([]*server, 0, len(r.servers))
		for _, s := range r.servers {
			servers = append(servers, s)
		}
		r.mu.Unlock()
		for _, s := range servers { // s.mu is not taken under r.mu
			s.mu.RLock()
			running := s.state == model.StateRunning
			s.mu.RUnlock()
			var n int64
			if running {
				n = 1
			}
			o.ObserveInt64(r.metrics.running, n, metric.WithAttributes(attribute.String(attrServer, s.slug)))
		}
		return nil
	}, r.metrics.running)
	if err != nil {
		r.log.Warn("metrics: cannot observe the running servers", "error", err)
		return func() {}
	}
	return func() { _ = reg.Unregister() }
}
