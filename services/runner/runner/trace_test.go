package runner_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/telemetry/conv"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// The trace of a call crosses every hop: the caller's span is the parent of
// the runner's consumer span, whose context reaches the MCP server in
// params._meta.traceparent, and the call event carries the trace id.
func TestTraceContextCrossesEveryHop(t *testing.T) {
	exp, tp := recordSpans(t)

	e := runnertest.Start(t, quickOpts())
	e.Put(t, runnertest.Binary("alpha", testServer))
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)

	ctx, root := tp.Tracer("test").Start(context.Background(), "agent turn")
	res, err := e.Client.Call(ctx, "alpha", "meta", nil, nil)
	root.End()
	if err != nil {
		t.Fatal(err)
	}
	traceID := root.SpanContext().TraceID().String()
	var meta map[string]any
	if err := json.Unmarshal([]byte(text(t, res)), &meta); err != nil {
		t.Fatalf("meta tool: %v", err)
	}
	tp0, _ := meta["traceparent"].(string)
	if !strings.Contains(tp0, traceID) {
		t.Fatalf("MCP server got traceparent %q, want trace %s", tp0, traceID)
	}
	// The runner ends its spans after it replied: give it a moment.
	var send, process, client sdktrace.ReadOnlySpan
	for deadline := time.Now().Add(3 * time.Second); (send == nil || process == nil || client == nil) && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, s := range exp.GetSpans().Snapshots() {
			if s.SpanContext().TraceID().String() != traceID {
				continue
			}
			switch s.Name() {
			case "send mcp.v1.call.{server}.{tool}":
				send = s
			case "process mcp.v1.call.{server}.{tool}":
				process = s
			case "tools/call meta":
				client = s
			}
		}
	}
	if send == nil || process == nil || client == nil {
		t.Fatalf("spans of trace %s: send %v, process %v, tools/call %v", traceID, send != nil, process != nil, client != nil)
	}
	// send (PRODUCER) → process (CONSUMER, remote parent) → tools/call (CLIENT) → the MCP server.
	if send.SpanKind() != trace.SpanKindProducer || process.SpanKind() != trace.SpanKindConsumer || client.SpanKind() != trace.SpanKindClient {
		t.Fatalf("kinds: send %v, process %v, client %v", send.SpanKind(), process.SpanKind(), client.SpanKind())
	}
	if send.Parent().SpanID() != root.SpanContext().SpanID() || process.Parent().SpanID() != send.SpanContext().SpanID() ||
		!process.Parent().IsRemote() || client.Parent().SpanID() != process.SpanContext().SpanID() {
		t.Fatal("spans are not chained agent turn → send → process → tools/call")
	}
	if !strings.Contains(tp0, client.SpanContext().SpanID().String()) {
		t.Fatalf("traceparent %q in _meta is not the tools/call span %s", tp0, client.SpanContext().SpanID())
	}
	want := map[string]string{
		"messaging.system": "nats", "messaging.destination.template": "mcp.v1.call.{server}.{tool}",
		"messaging.destination.name": "mcp.v1.call.alpha.meta", "messaging.operation.type": "send",
	}
	checkAttrs(t, send, want)
	checkAttrs(t, process, map[string]string{"messaging.system": "nats", "messaging.operation.type": "process",
		"messaging.consumer.group.name": "mcp.alpha"})
	checkAttrs(t, client, map[string]string{"mcp.method.name": "tools/call", "gen_ai.tool.name": "meta",
		"gen_ai.operation.name": "execute_tool", "network.transport": "pipe", "mcpbus.server": "alpha",
		"jsonrpc.request.id": "*", "mcp.protocol.version": "*"})
	for _, s := range []sdktrace.ReadOnlySpan{send, process, client} {
		if strings.Contains(s.Name(), "_INBOX") || strings.Contains(s.Name(), "_I.") {
			t.Fatalf("span name %q names an inbox", s.Name())
		}
	}
}

// A failed call marks the client span ERROR with error.type.
func TestFailedCallSpan(t *testing.T) {
	exp, _ := recordSpans(t)

	e := runnertest.Start(t, quickOpts())
	e.Put(t, runnertest.Binary("alpha", testServer))
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	if _, err := e.Client.Call(context.Background(), "alpha", "fail", json.RawMessage(`{"message":"boom"}`), nil); err != nil {
		t.Fatal(err)
	}
	var client sdktrace.ReadOnlySpan
	for deadline := time.Now().Add(3 * time.Second); client == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, s := range exp.GetSpans().Snapshots() {
			if s.Name() == "tools/call fail" {
				client = s
			}
		}
	}
	if client == nil {
		t.Fatal("no tools/call fail span")
	}
	if client.Status().Code != codes.Error {
		t.Fatalf("status %v, want Error", client.Status())
	}
	checkAttrs(t, client, map[string]string{"error.type": "tool_error"})
}

// checkAttrs fails unless span has every attribute of want ("*": any value).
func checkAttrs(t *testing.T, span sdktrace.ReadOnlySpan, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	for _, kv := range span.Attributes() {
		got[string(kv.Key)] = kv.Value.String()
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || (v != "*" && g != v) {
			t.Errorf("span %q: %s = %q, want %q (all: %v)", span.Name(), k, g, v, got)
		}
	}
}

// recordSpans installs a tracer provider that keeps every span in memory
// until the test ends.
func recordSpans(t *testing.T) (*tracetest.InMemoryExporter, *sdktrace.TracerProvider) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	return exp, tp
}

// traceResolver answers credentials and remembers the trace each resolve ran in.
type traceResolver struct {
	mu     sync.Mutex
	traces []trace.TraceID
}

func (r *traceResolver) Resolve(ctx context.Context, _ string) (model.ResolvedCredentials, error) {
	r.mu.Lock()
	r.traces = append(r.traces, trace.SpanContextFromContext(ctx).TraceID())
	r.mu.Unlock()
	return model.ResolvedCredentials{Env: map[string]string{"API_TOKEN": "start-span-secret"}}, nil
}

func (r *traceResolver) resolvedIn(id trace.TraceID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range r.traces {
		if t == id {
			return true
		}
	}
	return false
}

// A lazy start runs in a "start {server}" span under the call that woke the
// server, with its steps as events, and resolves the server's credentials
// in the same trace; a start asked for on the control subject is a child of
// that request's process span.
func TestStartSpans(t *testing.T) {
	exp, tp := recordSpans(t)
	res := &traceResolver{}
	opts := lifecycleOpts()
	opts.Resolver = res
	e := runnertest.Start(t, opts)
	cfg := runnertest.Binary("alpha", testServer)
	cfg.Runtime.IdleTimeout = model.Duration(300 * time.Millisecond)
	cfg.EnvVars = map[string]model.EnvVar{"API_TOKEN": {IsSecret: true}}
	e.Put(t, cfg)
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	e.WaitState(t, "alpha", model.StateIdle, 5*time.Second)

	ctx, root := tp.Tracer("test").Start(context.Background(), "agent turn")
	if _, err := e.Client.Call(ctx, "alpha", "echo", json.RawMessage(`{"message":"wake"}`), nil); err != nil {
		t.Fatal(err)
	}
	root.End()
	traceID := root.SpanContext().TraceID()
	find := func(id trace.TraceID, name string) sdktrace.ReadOnlySpan {
		for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			for _, s := range exp.GetSpans().Snapshots() {
				if s.SpanContext().TraceID() == id && s.Name() == name {
					return s
				}
			}
		}
		t.Fatalf("no span %q in trace %s", name, id)
		return nil
	}
	process := find(traceID, "process mcp.v1.call.{server}.{tool}")
	start := find(traceID, "start alpha")
	if start.Parent().SpanID() != process.SpanContext().SpanID() {
		t.Fatal("the lazy start is not a child of the call's process span")
	}
	checkAttrs(t, start, map[string]string{"mcpbus.server": "alpha", "mcpbus.package_type": "binary", "mcpbus.runner": "*"})
	var events []string
	for _, ev := range start.Events() {
		events = append(events, ev.Name)
	}
	if got := strings.Join(events, ","); got != "credentials resolved,spawned,initialized,tools listed" {
		t.Fatalf("start events: %s", got)
	}
	if !res.resolvedIn(traceID) {
		t.Fatal("the start's credential resolve ran outside the call's trace")
	}
	if start.EndTime().After(find(traceID, "tools/call echo").StartTime()) {
		t.Fatal("the call's tools/call began before the start ended")
	}

	// A restart asked on runtime.restart: process control (every replica) → start.
	ctx, root = tp.Tracer("test").Start(context.Background(), "operator")
	if _, err := e.Client.Runtime(ctx, "restart", "alpha"); err != nil {
		t.Fatal(err)
	}
	root.End()
	start = find(root.SpanContext().TraceID(), "start alpha")
	var parent sdktrace.ReadOnlySpan
	for _, s := range exp.GetSpans().Snapshots() {
		if s.SpanContext().SpanID() == start.Parent().SpanID() {
			parent = s
		}
	}
	if parent == nil || parent.Name() != "process mcp.v1.control.{server}.all" {
		t.Fatalf("the restart's start is not a child of the control request's process span (parent %v)", parent)
	}
	if !res.resolvedIn(root.SpanContext().TraceID()) {
		t.Fatal("the restart's credential resolve ran outside its trace")
	}
}

// A durable task runs after its request was answered, from a work queue:
// its run continues the request's trace (task create → process
// …tasks.run.{server} → tools/call), so the operator finds it in Jaeger
// under the call that asked for it.
func TestTaskRunContinuesTheCreatorsTrace(t *testing.T) {
	exp, tp := recordSpans(t)

	e := runnertest.Start(t, taskOpts("r1"))
	cfg, _ := taskServer(t, "slow")
	e.Put(t, cfg)
	e.WaitState(t, "slow", model.StateRunning, 10*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctx, root := tp.Tracer("test").Start(ctx, "agent turn")
	task, err := e.Client.CreateTask(ctx, "slow", "echo", json.RawMessage(`{"message":"traced"}`))
	root.End()
	if err != nil {
		t.Fatal(err)
	}
	if done := taskResult(t, e.Client, context.Background(), task.ID, 20*time.Second); done.State != model.TaskCompleted {
		t.Fatalf("task %+v", done)
	}
	traceID := root.SpanContext().TraceID()
	var create, run, call sdktrace.ReadOnlySpan
	for deadline := time.Now().Add(5 * time.Second); (create == nil || run == nil || call == nil) && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, s := range exp.GetSpans().Snapshots() {
			switch s.Name() {
			case "process mcp.v1.task.create":
				create = s
			case "process mcp.v1.tasks.run.{server}":
				run = s
			case "tools/call echo":
				call = s
			}
		}
	}
	if create == nil || run == nil || call == nil {
		t.Fatalf("spans: process task.create %v, process tasks.run %v, tools/call echo %v", create != nil, run != nil, call != nil)
	}
	for _, s := range []sdktrace.ReadOnlySpan{create, run, call} {
		if s.SpanContext().TraceID() != traceID {
			t.Errorf("span %q is in trace %v, want the creator's %v", s.Name(), s.SpanContext().TraceID(), traceID)
		}
	}
	if run.Parent().SpanID() != create.SpanContext().SpanID() || !run.Parent().IsRemote() || call.Parent().SpanID() != run.SpanContext().SpanID() {
		t.Error("spans are not chained process task.create → process tasks.run → tools/call")
	}
	if run.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("the run's span is %v, want CONSUMER", run.SpanKind())
	}
	checkAttrs(t, run, map[string]string{"messaging.system": "nats", "messaging.operation.type": "process",
		"messaging.destination.name": "mcp.v1.tasks.run.slow", "messaging.consumer.group.name": "task-slow",
		"mcpbus.server": "slow", "mcpbus.task.id": task.ID})
}

// The start span's "spawned" event carries the child's pid: the one the
// server's status reports, not 0 (it was read before the child started).
func TestStartSpanRecordsTheSpawnedPid(t *testing.T) {
	exp, _ := recordSpans(t)
	e := runnertest.Start(t, quickOpts())
	e.Put(t, runnertest.Binary("alpha", testServer))
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	pid := e.Status("alpha").PID
	if pid <= 0 {
		t.Fatalf("status pid %d", pid)
	}
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, s := range exp.GetSpans().Snapshots() {
			if s.Name() != "start alpha" {
				continue
			}
			for _, ev := range s.Events() {
				if ev.Name != "spawned" {
					continue
				}
				for _, kv := range ev.Attributes {
					if kv.Key == "process.pid" {
						if got := kv.Value.AsInt64(); got != int64(pid) {
							t.Fatalf("spawned event: process.pid %d, want the child's %d", got, pid)
						}
						return
					}
				}
				t.Fatalf("spawned event without process.pid: %v", ev.Attributes)
			}
			t.Fatal("the start span has no spawned event")
		}
	}
	t.Fatal("no start alpha span")
}

// With content capture on, the tools/call span records arguments only past
// the arguments policy (a blocked call records none) and redacts them and
// the result with the rules and every known value, whatever the server's
// policies: gamma has both off, so its server gets and returns the
// secrets, but the trace gets neither.
func TestCapturedContentRedacted(t *testing.T) {
	t.Setenv(conv.CaptureContentEnv, "true")
	exp, _ := recordSpans(t)
	opts := quickOpts()
	beta := secretHolder(&opts)
	e := runnertest.Start(t, opts)
	alpha := runnertest.Binary("alpha", testServer)
	gamma := runnertest.Binary("gamma", testServer)
	gamma.SecretScan = model.SecretsPolicy{Arguments: model.SecretsOff, Results: model.SecretsOff}
	for _, c := range []model.McpConfig{beta, alpha, gamma} {
		e.Put(t, c)
		e.WaitState(t, c.Name, model.StateRunning, 10*time.Second)
	}
	for _, c := range []struct{ server, args, want string }{
		{"alpha", `{"message":"key ` + testAWSKey + `"}`, ""}, // blocked
		{"gamma", `{"message":"key ` + testAWSKey + `"}`, "key " + testAWSKey},
		{"gamma", `{"message":"` + betaSecret + `"}`, betaSecret},
	} {
		res, err := call(t, e, c.server, "echo", c.args)
		if err != nil {
			t.Fatalf("%s %s: %v", c.server, c.args, err)
		}
		if c.want != "" && text(t, res) != c.want { // the policies are off: the caller gets it
			t.Fatalf("%s echoed %s", c.server, res)
		}
	}
	// The runner ends its spans after it replied: wait for gamma's two.
	var gammaCalls []sdktrace.ReadOnlySpan
	for deadline := time.Now().Add(3 * time.Second); len(gammaCalls) < 2 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		gammaCalls = gammaCalls[:0]
		for _, s := range exp.GetSpans().Snapshots() {
			for _, kv := range s.Attributes() {
				if kv.Key == "mcpbus.server" && kv.Value.AsString() == "gamma" && s.Name() == "tools/call echo" {
					gammaCalls = append(gammaCalls, s)
				}
			}
		}
	}
	if len(gammaCalls) != 2 {
		t.Fatalf("%d tools/call echo spans of gamma, want 2", len(gammaCalls))
	}
	for _, s := range exp.GetSpans().Snapshots() {
		for _, kv := range s.Attributes() {
			if v := kv.Value.String(); strings.Contains(v, testAWSKey) || strings.Contains(v, betaSecret) {
				t.Errorf("span %q: %s holds a secret in clear: %s", s.Name(), kv.Key, v)
			}
		}
	}
	// Redacted, not dropped.
	var recorded []string
	for _, s := range gammaCalls {
		for _, kv := range s.Attributes() {
			if kv.Key == "gen_ai.tool.call.arguments" || kv.Key == "gen_ai.tool.call.result" {
				recorded = append(recorded, kv.Value.AsString())
			}
		}
	}
	all := strings.Join(recorded, "\n")
	if len(recorded) != 4 || !strings.Contains(all, `{"message":"key [REDACTED:aws-access-token]"}`) ||
		!strings.Contains(all, "[REDACTED:mcpbus-known-secret]") {
		t.Errorf("recorded content:\n%s", all)
	}
}
