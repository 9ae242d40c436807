package loop_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/telemetry/conv"
	"github.com/mcpbus/mcpbus/services/chat/conversation"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
	"github.com/mcpbus/mcpbus/services/chat/loop"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// recordSpans installs a tracer provider keeping every span in memory, and a
// meter provider read by hand, until the test ends. The engine must be made
// after it (it makes its instruments in New).
func recordSpans(t *testing.T) (*tracetest.InMemoryExporter, *sdkmetric.ManualReader) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	prevTP, prevMP := otel.GetTracerProvider(), otel.GetMeterProvider()
	reader := sdkmetric.NewManualReader()
	otel.SetTracerProvider(tp)
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	t.Cleanup(func() { otel.SetTracerProvider(prevTP); otel.SetMeterProvider(prevMP) })
	return exp, reader
}

// spanTree indexes the ended spans by name.
type spanTree map[string][]tracetest.SpanStub

func spansOf(exp *tracetest.InMemoryExporter) spanTree {
	out := spanTree{}
	for _, s := range exp.GetSpans() {
		out[s.Name] = append(out[s.Name], s)
	}
	return out
}

// one is the only span named name.
func (st spanTree) one(t *testing.T, name string) tracetest.SpanStub {
	t.Helper()
	if len(st[name]) != 1 {
		t.Fatalf("%d spans %q, want 1 (all: %v)", len(st[name]), name, st.names())
	}
	return st[name][0]
}

func (st spanTree) names() []string {
	var out []string
	for n, ss := range st {
		for range ss {
			out = append(out, n)
		}
	}
	return out
}

func attrs(s tracetest.SpanStub) map[string]string {
	out := map[string]string{}
	for _, kv := range s.Attributes {
		out[string(kv.Key)] = kv.Value.String()
	}
	return out
}

// want fails unless span s has kind, parent and every attribute of want
// ("*": any value; "-": absent).
func want(t *testing.T, s tracetest.SpanStub, kind trace.SpanKind, parent trace.SpanContext, want map[string]string) {
	t.Helper()
	if s.SpanKind != kind {
		t.Errorf("span %q: kind %v, want %v", s.Name, s.SpanKind, kind)
	}
	if s.Parent.SpanID() != parent.SpanID() {
		t.Errorf("span %q: parent %v, want %v", s.Name, s.Parent.SpanID(), parent.SpanID())
	}
	got := attrs(s)
	for k, v := range want {
		g, ok := got[k]
		if (v == "-") == ok || (v != "*" && v != "-" && g != v) {
			t.Errorf("span %q: %s = %q (set %v), want %q", s.Name, k, g, ok, v)
		}
	}
}

func TestTurnSpans(t *testing.T) {
	exp, reader := recordSpans(t)
	h := setup(t, model.ChatProviderOpenAI, nil)
	var toolCtx trace.SpanContext
	h.fake.handlers["fake__look"] = func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		toolCtx = trace.SpanContextFromContext(ctx) // what bus.Request would make its PRODUCER span under
		return textResult("found"), nil
	}
	h.srv.Enqueue(llmtest.ToolCalls(llmtest.ToolCall{ID: "k1", Name: "fake__look", Arguments: `{"q":"secret question"}`}), llmtest.Text("done"))
	if done, err := h.eng.RunTurn(ctxT(t), "traced", h.prof, "a private prompt"); err != nil || done.Reason != model.TurnFinal {
		t.Fatalf("%+v %v", done, err)
	}
	st := spansOf(exp)
	agent := st.one(t, "invoke_agent p")
	want(t, agent, trace.SpanKindInternal, trace.SpanContext{}, map[string]string{
		"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "p", "gen_ai.conversation.id": "traced",
		"gen_ai.provider.name": "openai", "gen_ai.request.model": "m", "mcpbus.chat.end_reason": model.TurnFinal, "error.type": "-",
	})
	chats := st["chat m"]
	if len(chats) != 2 {
		t.Fatalf("%d chat spans, want 2 (all: %v)", len(chats), st.names())
	}
	for i, c := range chats {
		reason := []string{"tool_use", "end_turn"}[i]
		want(t, c, trace.SpanKindClient, agent.SpanContext, map[string]string{
			"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "m",
			"gen_ai.conversation.id": "traced", "gen_ai.usage.input_tokens": "11", "gen_ai.usage.output_tokens": "7",
			"gen_ai.response.finish_reasons": `["` + reason + `"]`, "error.type": "-", "gen_ai.input.messages": "-", "gen_ai.output.messages": "-",
		})
	}
	tool := st.one(t, "execute_tool fake__look")
	want(t, tool, trace.SpanKindInternal, agent.SpanContext, map[string]string{
		"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "fake__look", "gen_ai.tool.call.id": "k1",
		"mcpbus.server": "fake", "error.type": "-", "gen_ai.tool.call.arguments": "-", "gen_ai.tool.call.result": "-",
	})
	if toolCtx.SpanID() != tool.SpanContext.SpanID() {
		t.Errorf("the tool was called under span %v, want execute_tool's %v", toolCtx.SpanID(), tool.SpanContext.SpanID())
	}
	for _, s := range exp.GetSpans() {
		for _, kv := range s.Attributes {
			if strings.Contains(kv.Value.String(), "private prompt") || strings.Contains(kv.Value.String(), "secret question") {
				t.Errorf("span %q records content (%s) without the opt-in", s.Name, kv.Key)
			}
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	durations, tokens, turns := 0, map[string]int64{}, map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch m.Name {
			case "mcpbus.chat.turns":
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					reason, _ := dp.Attributes.Value(conv.MCPBusChatEndReason)
					turns[reason.AsString()] += dp.Value
				}
			case conv.GenAIClientOperationDuration:
				for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
					durations += int(dp.Count)
				}
			case conv.GenAIClientTokenUsage:
				for _, dp := range m.Data.(metricdata.Histogram[int64]).DataPoints {
					kind, _ := dp.Attributes.Value(conv.GenAITokenType)
					tokens[kind.AsString()] += dp.Sum
				}
			}
		}
	}
	if durations != 2 || tokens["input"] != 22 || tokens["output"] != 14 {
		t.Fatalf("metrics: %d step durations, tokens %v; want 2 and input 22, output 14", durations, tokens)
	}
	if len(turns) != 1 || turns[model.TurnFinal] != 1 {
		t.Fatalf("mcpbus.chat.turns: %v, want one %s", turns, model.TurnFinal)
	}
}

func TestTurnSpansOnErrors(t *testing.T) {
	exp, _ := recordSpans(t)
	h := setup(t, model.ChatProviderOpenAI, nil)
	h.fake.handlers["down__q"] = func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return nil, apierr.New(apierr.ServiceUnavailable, "server down is restarting")
	}
	h.fake.handlers["fake__iserr"] = func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"content":[{"type":"text","text":"bad input"}],"isError":true}`), nil
	}
	h.srv.Enqueue(llmtest.ToolCalls(llmtest.Call("down__q", `{}`), llmtest.Call("nope__x", `{}`), llmtest.Call("fake__iserr", `{}`)), llmtest.Error(400))
	done, err := h.eng.RunTurn(ctxT(t), "broken", h.prof, "go")
	if err != nil || done.Reason != model.TurnError {
		t.Fatalf("%+v %v", done, err)
	}
	st := spansOf(exp)
	agent := st.one(t, "invoke_agent p")
	code := attrs(agent)["error.type"]
	if code == "" || agent.Status.Code != codes.Error || attrs(agent)["mcpbus.chat.end_reason"] != model.TurnError {
		t.Fatalf("invoke_agent: error.type %q, status %v, attributes %v", code, agent.Status, attrs(agent))
	}
	chats := st["chat m"]
	if len(chats) != 2 {
		t.Fatalf("%d chat spans", len(chats))
	}
	failed := chats[1]
	want(t, failed, trace.SpanKindClient, agent.SpanContext, map[string]string{"error.type": code, "gen_ai.usage.input_tokens": "-"})
	if failed.Status.Code != codes.Error {
		t.Errorf("the failed step's status is %v", failed.Status)
	}
	for name, et := range map[string]string{
		"execute_tool down__q": string(apierr.ServiceUnavailable), "execute_tool nope__x": "unknown_tool", "execute_tool fake__iserr": conv.ToolError,
	} {
		s := st.one(t, name)
		want(t, s, trace.SpanKindInternal, agent.SpanContext, map[string]string{"error.type": et})
		if s.Status.Code != codes.Error {
			t.Errorf("%s: status %v", name, s.Status)
		}
	}
}

func TestTurnSpansContent(t *testing.T) {
	t.Setenv(conv.CaptureContentEnv, "true")
	exp, _ := recordSpans(t)
	h := setup(t, model.ChatProviderOpenAI, nil)
	h.prof.SystemPrompt = "Be brief."
	h.srv.Enqueue(llmtest.ToolCalls(llmtest.ToolCall{ID: "e1", Name: "fake__echo", Arguments: `{"message":"hello"}`}), llmtest.Text("it said hello"))
	if done, err := h.eng.RunTurn(ctxT(t), "content", h.prof, "say hello"); err != nil || done.Reason != model.TurnFinal {
		t.Fatalf("%+v %v", done, err)
	}
	st := spansOf(exp)
	tool := attrs(st.one(t, "execute_tool fake__echo"))
	if tool["gen_ai.tool.call.arguments"] != `{"message":"hello"}` || tool["gen_ai.tool.call.result"] != "echo: hello" {
		t.Fatalf("tool content %v", tool)
	}
	second := attrs(st["chat m"][1])
	var in []struct {
		Role  string `json:"role"`
		Parts []struct {
			Type     string `json:"type"`
			Content  string `json:"content"`
			ID       string `json:"id"`
			Response string `json:"response"`
		} `json:"parts"`
	}
	if err := json.Unmarshal([]byte(second["gen_ai.input.messages"]), &in); err != nil {
		t.Fatalf("input messages %q: %v", second["gen_ai.input.messages"], err)
	}
	if len(in) != 3 || in[0].Parts[0].Content != "say hello" || in[1].Parts[0].Type != "tool_call" ||
		in[2].Role != "tool" || in[2].Parts[0].ID != "e1" || in[2].Parts[0].Response != "echo: hello" {
		t.Fatalf("input messages %s", second["gen_ai.input.messages"])
	}
	if !strings.Contains(second["gen_ai.system_instructions"], "Be brief.") ||
		second["gen_ai.output.messages"] != `[{"role":"assistant","parts":[{"type":"text","content":"it said hello"}],"finish_reason":"end_turn"}]` {
		t.Fatalf("system %q, output %q", second["gen_ai.system_instructions"], second["gen_ai.output.messages"])
	}
}

// Captured content goes through the secret scanner's redaction: a key the
// user pasted and the model passed to a tool, and one a tool's result held,
// reach no span attribute (prompts, completions, tool arguments, results).
func TestTurnSpansContentRedacted(t *testing.T) {
	const pasted, leaked = "AKIAZ3MQXP7R2HKW5Y4N", "AKIAQ4TZ7MXW2RKP5Y3V" // AWS key ids, valid nowhere
	t.Setenv(conv.CaptureContentEnv, "true")
	exp, _ := recordSpans(t)
	h := setup(t, model.ChatProviderOpenAI, nil)
	h.fake.handlers["fake__leak"] = func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return textResult("found aws_access_key_id = " + leaked), nil
	}
	h.srv.Enqueue(llmtest.ToolCalls(
		llmtest.ToolCall{ID: "e1", Name: "fake__echo", Arguments: `{"message":"` + pasted + `"}`},
		llmtest.ToolCall{ID: "l1", Name: "fake__leak", Arguments: `{}`}),
		llmtest.Text("your key "+pasted+" and the other "+leaked))
	if done, err := h.eng.RunTurn(ctxT(t), "redacted", h.prof, "use my key "+pasted); err != nil || done.Reason != model.TurnFinal {
		t.Fatalf("%+v %v", done, err)
	}
	st := spansOf(exp)
	for _, s := range exp.GetSpans() {
		for k, v := range attrs(s) {
			if strings.Contains(v, pasted) || strings.Contains(v, leaked) {
				t.Errorf("span %q: %s holds a key in clear: %s", s.Name, k, v)
			}
		}
	}
	// Redacted, not dropped: the rest of the content is still there.
	marker := "[REDACTED:aws-access-token]"
	echo, leak := attrs(st.one(t, "execute_tool fake__echo")), attrs(st.one(t, "execute_tool fake__leak"))
	if echo["gen_ai.tool.call.arguments"] != `{"message":"`+marker+`"}` || echo["gen_ai.tool.call.result"] != "echo: "+marker {
		t.Errorf("echo content %v", echo)
	}
	if leak["gen_ai.tool.call.result"] != "found aws_access_key_id = "+marker {
		t.Errorf("leak content %v", leak)
	}
	second := attrs(st["chat m"][1])
	if !strings.Contains(second["gen_ai.input.messages"], "use my key "+marker) || !strings.Contains(second["gen_ai.output.messages"], "your key "+marker) {
		t.Errorf("messages: input %s, output %s", second["gen_ai.input.messages"], second["gen_ai.output.messages"])
	}
}

// TestTurnSpansOverTheBus: the tool call's bus request and the runner's MCP
// request continue the turn's trace under execute_tool.
func TestTurnSpansOverTheBus(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a test MCP server")
	}
	exp, _ := recordSpans(t)
	bin, cleanup, err := runnertest.BuildTestServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	e := runnertest.Start(t, runner.Options{StopGrace: 100 * time.Millisecond, StopTimeout: 2 * time.Second,
		StartTimeout: 10 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	e.Put(t, runnertest.Binary("tm", bin, "-name", "tm"))
	e.WaitState(t, "tm", model.StateRunning, 15*time.Second)
	l, err := conversation.Open(ctxT(t), e.JS, conversation.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := llmtest.Start(t, "sk-test")
	eng := loop.New(loop.Deps{Log: l, Tools: loop.ClientTools{C: e.Client}, Model: newModel, CallTimeout: 10 * time.Second})
	prof := model.Profile{Name: "p", Provider: model.ChatProviderOpenAI, Model: "m", BaseURL: srv.OpenAIBaseURL()}
	srv.Enqueue(llmtest.ToolCalls(llmtest.Call("tm__echo", `{"message":"traced"}`)), llmtest.Text("ok"))
	if done, err := eng.RunTurn(ctxT(t), "bus", prof, "go"); err != nil || done.Reason != model.TurnFinal {
		t.Fatalf("%+v %v", done, err)
	}
	st := spansOf(exp)
	tool := st.one(t, "execute_tool tm__echo")
	byParent := map[trace.SpanID][]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		byParent[s.Parent.SpanID()] = append(byParent[s.Parent.SpanID()], s)
	}
	// execute_tool → send (PRODUCER) → process (CONSUMER) → tools/call echo (CLIENT).
	chain := []trace.SpanKind{trace.SpanKindProducer, trace.SpanKindConsumer, trace.SpanKindClient}
	at := tool
	for _, kind := range chain {
		var next *tracetest.SpanStub
		for _, c := range byParent[at.SpanContext.SpanID()] {
			if c.SpanKind == kind {
				next = &c
			}
		}
		if next == nil {
			t.Fatalf("no %v span under %q (spans: %v)", kind, at.Name, st.names())
		}
		at = *next
	}
	if at.Name != "tools/call echo" || at.SpanContext.TraceID() != st.one(t, "invoke_agent p").SpanContext.TraceID() {
		t.Fatalf("the chain ends at %q in trace %v", at.Name, at.SpanContext.TraceID())
	}
}

// TestTurnSpansHandOff: a turn handed over to another instance is no failure
// of its invocation.
func TestTurnSpansHandOff(t *testing.T) {
	exp, _ := recordSpans(t)
	h := setup(t, model.ChatProviderOpenAI, nil)
	ctx, stop := context.WithCancelCause(ctxT(t))
	h.fake.handlers["fake__hang"] = func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		stop(loop.ErrHandOff)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	h.srv.Enqueue(llmtest.ToolCalls(llmtest.Call("fake__hang", `{}`)))
	if _, err := h.eng.RunTurn(ctx, "handoff", h.prof, "go"); !errors.Is(err, loop.ErrHandOff) {
		t.Fatalf("RunTurn: %v, want ErrHandOff", err)
	}
	st := spansOf(exp)
	agent := st.one(t, "invoke_agent p")
	want(t, agent, trace.SpanKindInternal, trace.SpanContext{}, map[string]string{"error.type": "-", "mcpbus.chat.end_reason": "handed_off"})
	if agent.Status.Code == codes.Error {
		t.Errorf("invoke_agent status %v", agent.Status)
	}
	want(t, st.one(t, "execute_tool fake__hang"), trace.SpanKindInternal, agent.SpanContext, map[string]string{"error.type": "cancelled"})
}
