package mcpserver_test

import (
	"encoding/json"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/gateway/mcpserver"
)

// A task asked for on /mcp continues the trace the client put in the
// request's _meta, down to the runner's run of it; a request about a task
// is named by its method, the task id an attribute (a span name per task
// id would be a name per request).
func TestTaskRequestsContinueTheClientsTrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)))
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	e := start(t, mcpserver.Options{NoAuth: true}, nil)
	e.addServer(t, "alpha", nil)
	sid := rawSession(t, e.url)

	const traceID, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	m := decodeMsg(t, raw(t, e.url, "", sid, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"alpha__echo",`+
		`"arguments":{"message":"as a task"},"task":{},"_meta":{"traceparent":"00-`+traceID+`-`+clientSpan+`-01"}}}`))
	var task struct{ TaskID string }
	if err := json.Unmarshal(m.Result["task"], &task); err != nil || task.TaskID == "" {
		t.Fatalf("tools/call as a task: %+v", m)
	}
	if g := decodeMsg(t, raw(t, e.url, "", sid, `{"jsonrpc":"2.0","id":4,"method":"tasks/get","params":{"taskId":"`+task.TaskID+`"}}`)); g.Error != nil {
		t.Fatalf("tasks/get: %+v", g)
	}

	find := func(name string) (tracetest.SpanStub, bool) {
		for _, s := range exp.GetSpans() {
			if s.Name == name {
				return s, true
			}
		}
		return tracetest.SpanStub{}, false
	}
	var create, run, get tracetest.SpanStub
	testkit.WaitFor(t, 15*time.Second, func() (bool, string) {
		var ok [3]bool
		create, ok[0] = find("tools/call alpha__echo")
		run, ok[1] = find("process mcp.v1.tasks.run.{server}")
		get, ok[2] = find("tasks/get")
		return ok == [3]bool{true, true, true}, "spans tools/call alpha__echo, process tasks.run, tasks/get: " + jsonOf(ok)
	})
	if create.SpanContext.TraceID().String() != traceID || create.Parent.SpanID().String() != clientSpan {
		t.Errorf("the task's tools/call: trace %v parent %v, want the client's _meta %s %s",
			create.SpanContext.TraceID(), create.Parent.SpanID(), traceID, clientSpan)
	}
	if run.SpanContext.TraceID().String() != traceID {
		t.Errorf("the task's run is in trace %v, want the client's %s", run.SpanContext.TraceID(), traceID)
	}
	found := false
	for _, kv := range get.Attributes {
		found = found || (kv.Key == "mcpbus.task.id" && kv.Value.AsString() == task.TaskID)
	}
	if !found {
		t.Errorf("tasks/get: no mcpbus.task.id %s in %v", task.TaskID, get.Attributes)
	}
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
