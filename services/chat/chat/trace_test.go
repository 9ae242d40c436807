package chat

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
)

// A turn runs after the send's reply, in the background, yet its spans are
// the send's trace: the caller's send → the service's process span →
// invoke_agent → its model steps and tool calls (what /v1/chat/completions
// and the console's chat are followed by in Jaeger).
func TestTurnContinuesTheSendsTrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	prev := otel.GetTracerProvider()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	e := newEnv(t)
	e.startService(t, 0)
	e.putProfile(t, model.Profile{Name: "local", Provider: model.ChatProviderOpenAI, Model: "m", BaseURL: e.llm.OpenAIBaseURL(),
		ToolFilter: model.ChatToolFilter{Include: []string{"tm__*"}}})
	e.llm.Enqueue(llmtest.ToolCalls(llmtest.Call("tm__echo", `{"message":"traced"}`)), llmtest.Text("done"))
	f := e.follow(t, "traced")

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ctx, root := tp.Tracer("test").Start(ctx, "client")
	var sent model.ChatSendReply
	err := bus.RequestJSON(ctx, e.nc, bus.NewSubjects("").Service("chat", "send"),
		model.ChatSendRequest{Conversation: "traced", Profile: "local", Message: "echo"}, &sent, 20*time.Second)
	root.End()
	if err != nil {
		t.Fatal(err)
	}
	if d := f.done(t, 1, 30*time.Second); d.Reason != model.TurnFinal {
		t.Fatalf("done = %+v", d)
	}

	byName := func(name string) (tracetest.SpanStub, bool) {
		for _, s := range exp.GetSpans() {
			if s.Name == name {
				return s, true
			}
		}
		return tracetest.SpanStub{}, false
	}
	var process, agent, chat, tool tracetest.SpanStub
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
		var ok [4]bool
		process, ok[0] = byName("process mcp.v1.chat.send")
		agent, ok[1] = byName("invoke_agent local")
		chat, ok[2] = byName("chat m")
		tool, ok[3] = byName("execute_tool tm__echo")
		return ok == [4]bool{true, true, true, true}, fmt.Sprintf("process, invoke_agent, chat, execute_tool ended: %v", ok)
	})
	want := root.SpanContext().TraceID()
	for _, s := range []tracetest.SpanStub{process, agent, chat, tool} {
		if s.SpanContext.TraceID() != want {
			t.Errorf("span %q is in trace %v, want the send's %v", s.Name, s.SpanContext.TraceID(), want)
		}
	}
	if agent.Parent.SpanID() != process.SpanContext.SpanID() {
		t.Errorf("invoke_agent's parent is %v, want the send's process span %v", agent.Parent.SpanID(), process.SpanContext.SpanID())
	}
	for _, s := range []tracetest.SpanStub{chat, tool} {
		if s.Parent.SpanID() != agent.SpanContext.SpanID() {
			t.Errorf("span %q's parent is %v, want invoke_agent %v", s.Name, s.Parent.SpanID(), agent.SpanContext.SpanID())
		}
	}
}
