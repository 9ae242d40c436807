package service

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/mcpbus/mcpbus/libs/ops"
	"github.com/mcpbus/mcpbus/libs/settings"
	"github.com/mcpbus/mcpbus/libs/telemetry"
)

// DefaultMetricsAddr is the address the docs suggest for --metrics-addr
// (9464: the Prometheus exporter port of OpenTelemetry) and the one
// `mcpbus health` asks by default.
const DefaultMetricsAddr = "127.0.0.1:9464"

// RegisterMetricsAddr adds --metrics-addr (mcpbus up has it too): where the
// operations endpoint (/metrics, /healthz, /readyz) listens; empty: none.
func RegisterMetricsAddr(s *settings.Set, p *string) {
	s.String(p, "metrics-addr", "", "",
		"where /metrics (Prometheus), /healthz and /readyz listen, e.g. "+DefaultMetricsAddr+"; empty: no such endpoint")
}

// validMetricsAddr checks a --metrics-addr value ("" is off).
func validMetricsAddr(addr string) error {
	if addr == "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("--metrics-addr %q: want host:port (%v)", addr, err)
	}
	return nil
}

// StartOps, when addr is set, installs the metrics provider of the process
// (telemetry.SetupMetrics, as name and version) and serves the operations
// endpoint on addr, not ready until SetChecks. With addr empty it does
// nothing: the returned *ops.Server is nil (its methods then do nothing) and
// metrics cost no more than the no-op meter. Call it before building the
// services, so their instruments report to the provider; stop ends both.
func StartOps(addr, name, version string, log *slog.Logger) (srv *ops.Server, stop func(), err error) {
	if addr == "" {
		return nil, func() {}, nil
	}
	if err := validMetricsAddr(addr); err != nil {
		return nil, nil, err
	}
	metrics, shutdown, err := telemetry.SetupMetrics(name, version)
	if err != nil {
		return nil, nil, err
	}
	stopMetrics := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = shutdown(ctx)
	}
	if srv, err = ops.Start(ops.Options{Addr: addr, Metrics: metrics, Logger: log}); err != nil {
		stopMetrics()
		return nil, nil, err
	}
	return srv, func() { srv.Close(); stopMetrics() }, nil
}
