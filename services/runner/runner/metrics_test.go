package runner_test

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/telemetry"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// lifecycleSums reads the runner's lifecycle metrics: the running servers
// by server, and the restarts by server and reason.
func lifecycleSums(t *testing.T, r *sdkmetric.ManualReader) (running map[string]int64, restarts map[[2]string]int64) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	running, restarts = map[string]int64{}, map[[2]string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
			for _, dp := range sum.DataPoints {
				server, _ := dp.Attributes.Value("mcpbus.server")
				reason, _ := dp.Attributes.Value("reason")
				switch m.Name {
				case "mcpbus.runner.servers.running":
					running[server.AsString()] += dp.Value
				case "mcpbus.runner.server.restarts":
					restarts[[2]string{server.AsString(), reason.AsString()}] += dp.Value
				}
			}
		}
	}
	return running, restarts
}

// TestLifecycleMetrics: the running server is counted while it runs, and
// each restart by its reason: manual, crash, health.
func TestLifecycleMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	otel.SetMeterProvider(mp) // before the runner makes its instruments
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })

	opts := lifecycleOpts()
	opts.HealthInterval = 100 * time.Millisecond
	opts.HealthTimeout = 200 * time.Millisecond
	opts.HealthFailures = 2
	opts.StopTimeout = 300 * time.Millisecond
	e := runnertest.Start(t, opts)
	e.Put(t, runnertest.Binary("alpha", testServer))
	first := e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	if running, restarts := lifecycleSums(t, reader); running["alpha"] != 1 || len(running) != 1 || len(restarts) != 0 {
		t.Fatalf("after the start: running %v, restarts %v", running, restarts)
	}

	newPID := func(old int) model.Status {
		t.Helper()
		var st model.Status
		testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
			st = e.Status("alpha")
			return st.State == model.StateRunning && st.PID != old && st.PID > 0, "alpha is not running again"
		})
		return st
	}
	if _, err := e.Client.Runtime(context.Background(), "restart", "alpha"); err != nil {
		t.Fatal(err)
	}
	second := newPID(first.PID)
	if err := syscall.Kill(second.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	third := newPID(second.PID)
	if err := syscall.Kill(third.PID, syscall.SIGSTOP); err != nil { // it stops answering pings
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(third.PID, syscall.SIGKILL) }()
	newPID(third.PID)

	running, restarts := lifecycleSums(t, reader)
	if running["alpha"] != 1 {
		t.Errorf("running: %v, want alpha 1", running)
	}
	if restarts[[2]string{"alpha", "manual"}] != 1 || restarts[[2]string{"alpha", "crash"}] < 1 || restarts[[2]string{"alpha", "health"}] < 1 {
		t.Errorf("restarts: %v, want 1 manual, at least 1 crash and 1 health", restarts)
	}

	// Stopped: a stopped server counts 0; a stopped runner reports nothing.
	if _, err := e.Client.Runtime(context.Background(), "stop", "alpha"); err != nil {
		t.Fatal(err)
	}
	if running, _ := lifecycleSums(t, reader); running["alpha"] != 0 {
		t.Errorf("after stop: running %v, want alpha 0", running)
	}
	e.StopRunner(t)
	if running, _ := lifecycleSums(t, reader); len(running) != 0 {
		t.Errorf("after the runner stopped: running %v, want no series", running)
	}
}

// TestCallMetricsBoundPromptNames: an agent names the prompt it asks for,
// and each name was a value of gen_ai.prompt.name, the first
// MaxPromptNames of a server kept whether or not the server had such a
// prompt (and /metrics asks no credentials). A prompts/get that failed is
// recorded as Other (its span keeps the name): 1000 prompts that do not
// exist leave mcp.client.operation.duration with one series of Other, and
// the server's own prompt keeps its name.
func TestCallMetricsBoundPromptNames(t *testing.T) {
	reader := testkit.MeterReader(t) // before the runner makes its instruments
	e := runnertest.Start(t, quickOpts())
	e.Put(t, runnertest.Binary("alpha", testServer))
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	ctx := context.Background()
	const n = 1000
	for i := range n {
		_ = e.Client.RPC(ctx, "alpha", "prompts/get", map[string]any{"name": fmt.Sprint("nope-", i)}, nil)
	}
	if err := e.Client.RPC(ctx, "alpha", "prompts/get", map[string]any{"name": "greet", "arguments": map[string]string{"who": "x"}}, nil); err != nil {
		t.Fatal(err)
	}
	series := map[string]int64{}
	for s, count := range testkit.Metrics(t, reader) {
		if !strings.HasPrefix(s, "mcp.client.operation.duration|") {
			continue
		}
		if _, name, ok := strings.Cut(s, "gen_ai.prompt.name="); ok {
			name, _, _ = strings.Cut(name, ",")
			name, _, _ = strings.Cut(name, "|")
			series[name] += count
		}
	}
	if len(series) != 2 || series[telemetry.Other] != n || series["greet"] != 1 {
		t.Errorf("prompts/get by gen_ai.prompt.name: %v, want %s: %d and greet: 1", series, telemetry.Other, n)
	}
}
