package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// spanLog is the spans recorded in this process while a test runs.
type spanLog struct{ exp *tracetest.InMemoryExporter }

// recordSpans installs a tracer provider keeping every span in memory (as
// telemetry.Setup installs one when export is on) until the test ends.
func recordSpans(t *testing.T) spanLog {
	exp := tracetest.NewInMemoryExporter()
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)))
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	return spanLog{exp}
}

func (l spanLog) byID(id trace.SpanID) (tracetest.SpanStub, bool) {
	for _, s := range l.exp.GetSpans() {
		if s.SpanContext.SpanID() == id {
			return s, true
		}
	}
	return tracetest.SpanStub{}, false
}

// chain is the names of the span's ancestors, nearest first, as far as
// they are recorded.
func (l spanLog) chain(s tracetest.SpanStub) []string {
	var out []string
	for s.Parent.IsValid() {
		p, ok := l.byID(s.Parent.SpanID())
		if !ok {
			return append(out, "(unrecorded "+s.Parent.SpanID().String()+")")
		}
		out = append(out, p.Name)
		s = p
	}
	return out
}

// taggedRT marks each request with a User-Agent of its own, so the test finds
// the HTTP span of each; and a forged X-Forwarded-For.
type taggedRT struct {
	key string
	tag string
}

func (rt *taggedRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+rt.key)
	r.Header.Set("User-Agent", rt.tag)
	r.Header.Set("X-Forwarded-For", "203.0.113.66")
	return http.DefaultTransport.RoundTrip(r)
}

// Every MCP request of /mcp, on the fast path and through go-sdk, in both
// eras (a 2025-11-25 session and sessionless 2026-07-28), is a child of its
// HTTP request's span, and its bus request and the runner's tools/call
// follow in the same trace; /mcp/invoke likewise. The HTTP span's
// client.address is the peer the gateway trusts, not a header a client
// wrote.
func TestEveryMCPRequestIsOneTrace(t *testing.T) {
	spans := recordSpans(t)
	e := runnertest.Start(t, quietRunner())
	h := startGateway(t, e, gateway.Options{RateRPS: 1000, RateBurst: 1000})
	runServer(t, e, "alpha", nil)
	h.waitTool(h.admin, "alpha__echo")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, era := range []string{"2025-11-25", ""} {
		for _, path := range []string{"fast", "go-sdk"} {
			tag := fmt.Sprintf("trace-test era=%q path=%s", era, path)
			rt := &taggedRT{key: h.admin, tag: tag + " connect"}
			var opts *mcp.ClientSessionOptions
			if era != "" {
				opts = &mcp.ClientSessionOptions{ProtocolVersion: era}
			}
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx,
				&mcp.StreamableClientTransport{Endpoint: h.url + "/mcp", MaxRetries: -1, HTTPClient: &http.Client{Transport: rt}}, opts)
			if err != nil {
				t.Fatal(err)
			}
			p := &mcp.CallToolParams{Name: "alpha__echo", Arguments: map[string]any{"message": "hi"}}
			if path == "go-sdk" {
				p.Meta = mcp.Meta{"progressToken": "p1"} // go-sdk answers calls with a progress token
			}
			rt.tag = tag
			if res, err := cs.CallTool(ctx, p); err != nil || res.IsError {
				t.Fatalf("%s: tools/call: %v %+v", tag, err, res)
			}
			rt.tag = tag + " close"
			_ = cs.Close()
			checkMCPTrace(t, spans, tag)
		}
	}

	// /mcp/invoke.
	req, err := http.NewRequest("POST", h.url+"/mcp/invoke", strings.NewReader(`{"tool_name":"alpha__echo","params":{"message":"hi"}}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	rt := &taggedRT{key: h.admin, tag: "trace-test invoke"}
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/mcp/invoke: %d", resp.StatusCode)
	}
	var call tracetest.SpanStub
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
		for _, s := range spans.exp.GetSpans() {
			if s.Name == "tools/call echo" && httpSpanOf(spans, s).Name == "POST /mcp/invoke" && userAgent(httpSpanOf(spans, s)) == "trace-test invoke" {
				call = s
				return true, ""
			}
		}
		return false, "no tools/call echo under POST /mcp/invoke"
	})
	if got, want := strings.Join(spans.chain(call), " < "), "process mcp.v1.call.{server}.{tool} < send mcp.v1.call.{server}.{tool} < POST /mcp/invoke"; got != want {
		t.Errorf("/mcp/invoke: tools/call echo < %s, want < %s", got, want)
	}

	// /api/v1: a task, whose run comes later, from the work queue.
	req, err = http.NewRequest("POST", h.url+"/api/v1/tasks", strings.NewReader(`{"name":"alpha__echo","arguments":{"message":"task"}}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err = (&http.Client{Transport: &taggedRT{key: h.admin, tag: "trace-test task"}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /api/v1/tasks: %d", resp.StatusCode)
	}
	const want = "process mcp.v1.tasks.run.{server} < process mcp.v1.task.create < send mcp.v1.task.create < POST /api/v1/tasks"
	testkit.WaitFor(t, 15*time.Second, func() (bool, string) {
		var chains []string
		for _, s := range spans.exp.GetSpans() {
			if s.Name == "tools/call echo" {
				if c := strings.Join(spans.chain(s), " < "); c == want {
					return true, ""
				} else if strings.Contains(c, "tasks.run") {
					chains = append(chains, c)
				}
			}
		}
		return false, fmt.Sprintf("the task's tools/call echo: under %q, want under %q", chains, want)
	})
}

// checkMCPTrace finds the runner's tools/call span of the request tagged
// tag and checks its place in the trace (the runner ends its spans after
// it replied: the chain is awaited).
func checkMCPTrace(t *testing.T, spans spanLog, tag string) {
	t.Helper()
	const want = "process mcp.v1.call.{server}.{tool} < send mcp.v1.call.{server}.{tool} < tools/call alpha__echo < POST /mcp"
	var httpSpan tracetest.SpanStub
	got := ""
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
		for _, s := range spans.exp.GetSpans() {
			if s.Name == "POST /mcp" && userAgent(s) == tag {
				httpSpan = s
			}
		}
		got = "(no tools/call echo in the trace of the HTTP span)"
		for _, s := range spans.exp.GetSpans() {
			if s.Name == "tools/call echo" && s.SpanContext.TraceID() == httpSpan.SpanContext.TraceID() {
				got = strings.Join(spans.chain(s), " < ")
			}
		}
		// Where the gateway's span went, when not there.
		var lost []string
		for _, s := range spans.exp.GetSpans() {
			if s.Name == "tools/call alpha__echo" && s.SpanContext.TraceID() != httpSpan.SpanContext.TraceID() {
				lost = append(lost, strings.Join(spans.chain(s), " < "))
			}
		}
		return got == want, fmt.Sprintf("%s: tools/call echo < %s, want < %s (gateway spans in other traces: under %q)", tag, got, want, lost)
	})
	for _, kv := range httpSpan.Attributes {
		if kv.Key == "client.address" && kv.Value.AsString() != "127.0.0.1" {
			t.Errorf("%s: client.address %q, want the peer 127.0.0.1 (X-Forwarded-For is no trusted proxy's)", tag, kv.Value.AsString())
		}
	}
}

// httpSpanOf is the nearest HTTP SERVER ancestor of s.
func httpSpanOf(spans spanLog, s tracetest.SpanStub) tracetest.SpanStub {
	for s.Parent.IsValid() {
		p, ok := spans.byID(s.Parent.SpanID())
		if !ok {
			break
		}
		if strings.HasPrefix(p.Name, "POST ") {
			return p
		}
		s = p
	}
	return tracetest.SpanStub{}
}

func userAgent(s tracetest.SpanStub) string {
	for _, kv := range s.Attributes {
		if kv.Key == "user_agent.original" {
			return kv.Value.AsString()
		}
	}
	return ""
}

// /mcp?tools=search's call_tool, resources/read and prompts/get are each one
// trace from the HTTP request to the runner's request of the server, in
// both eras: POST /mcp → the gateway's MCP span → send → process → the
// runner's CLIENT span, with the attributes docs/operating.md lists.
func TestSearchResourcesAndPromptsAreOneTrace(t *testing.T) {
	spans := recordSpans(t)
	e := runnertest.Start(t, quietRunner())
	h := startGateway(t, e, gateway.Options{RateRPS: 1000, RateBurst: 1000})
	runServer(t, e, "alpha", nil)
	h.waitTool(h.admin, "alpha__echo")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, era := range []string{"2025-11-25", ""} {
		tag := fmt.Sprintf("trace-test-2 era=%q", era)
		var opts *mcp.ClientSessionOptions
		if era != "" {
			opts = &mcp.ClientSessionOptions{ProtocolVersion: era}
		}
		connect := func(url string, rt *taggedRT) *mcp.ClientSession {
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx,
				&mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1, HTTPClient: &http.Client{Transport: rt}}, opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cs.Close() })
			return cs
		}
		type step struct {
			name     string
			do       func(cs *mcp.ClientSession) error
			gw, run  string            // the gateway's and the runner's span names
			send     string            // the bus subject's template
			gwAttrs  map[string]string // on the gateway's MCP span
			runAttrs map[string]string // on the runner's CLIENT span
		}
		steps := []step{{
			name: "search call_tool",
			do: func(cs *mcp.ClientSession) error {
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "call_tool", Arguments: map[string]any{"name": "alpha__echo", "arguments": map[string]any{"message": "hi"}}})
				if err == nil && res.IsError {
					err = fmt.Errorf("call_tool: %+v", res)
				}
				return err
			},
			gw: "tools/call call_tool", run: "tools/call echo", send: "mcp.v1.call.{server}.{tool}",
			gwAttrs:  map[string]string{"mcp.method.name": "tools/call", "gen_ai.tool.name": "call_tool"},
			runAttrs: map[string]string{"mcp.method.name": "tools/call", "gen_ai.tool.name": "echo", "gen_ai.operation.name": "execute_tool"},
		}, {
			name: "resources/read",
			do: func(cs *mcp.ClientSession) error {
				_, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "mcpbus://alpha/test:%2F%2Fgreeting"})
				return err
			},
			gw: "resources/read", run: "resources/read", send: "mcp.v1.rpc.{server}",
			gwAttrs:  map[string]string{"mcp.method.name": "resources/read", "mcp.resource.uri": "mcpbus://alpha/test:%2F%2Fgreeting"},
			runAttrs: map[string]string{"mcp.method.name": "resources/read", "mcp.resource.uri": "test://greeting"},
		}, {
			name: "prompts/get",
			do: func(cs *mcp.ClientSession) error {
				_, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "alpha__greet", Arguments: map[string]string{"who": "x"}})
				return err
			},
			gw: "prompts/get alpha__greet", run: "prompts/get greet", send: "mcp.v1.rpc.{server}",
			gwAttrs:  map[string]string{"mcp.method.name": "prompts/get", "gen_ai.prompt.name": "alpha__greet"},
			runAttrs: map[string]string{"mcp.method.name": "prompts/get", "gen_ai.prompt.name": "greet"},
		}}
		for _, st := range steps {
			stepTag := tag + " " + st.name
			url := h.url + "/mcp"
			if st.name == "search call_tool" {
				url += "?tools=search"
			}
			rt := &taggedRT{key: h.admin, tag: stepTag + " connect"}
			cs := connect(url, rt)
			rt.tag = stepTag
			if err := st.do(cs); err != nil {
				t.Fatalf("%s: %v", stepTag, err)
			}
			want := "process " + st.send + " < send " + st.send + " < " + st.gw + " < POST /mcp"
			var runSpan, gwSpan tracetest.SpanStub
			testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
				var seen []string
				for _, s := range spans.exp.GetSpans() {
					if s.Name != st.run || s.SpanKind != trace.SpanKindClient || userAgent(httpSpanOf(spans, s)) != stepTag {
						continue
					}
					c := spans.chain(s)
					got := strings.Join(c, " < ")
					if got == want {
						runSpan = s
						for _, p := range []tracetest.SpanStub{s} {
							for p.Parent.IsValid() {
								p, _ = spans.byID(p.Parent.SpanID())
								if p.Name == st.gw {
									gwSpan = p
								}
							}
						}
						return true, ""
					}
					seen = append(seen, got)
				}
				return false, fmt.Sprintf("%s: %s < %q, want < %s", stepTag, st.run, seen, want)
			})
			if gwSpan.SpanKind != trace.SpanKindServer {
				t.Errorf("%s: the gateway's %q span is %v, want SERVER", stepTag, gwSpan.Name, gwSpan.SpanKind)
			}
			checkStubAttrs(t, stepTag, gwSpan, st.gwAttrs)
			checkStubAttrs(t, stepTag, runSpan, st.runAttrs)
		}
	}
}

// checkStubAttrs fails unless s has every attribute of want.
func checkStubAttrs(t *testing.T, tag string, s tracetest.SpanStub, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	for _, kv := range s.Attributes {
		got[string(kv.Key)] = kv.Value.String()
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: span %q: %s = %q, want %q (all: %v)", tag, s.Name, k, got[k], v, got)
		}
	}
}

// A tool's isError result marks the gateway's MCP span and the runner's
// tools/call ERROR with error.type=tool_error, on the fast path and
// through go-sdk, in both eras (docs/operating.md, Tracing).
func TestToolErrorMarksTheCallsSpans(t *testing.T) {
	spans := recordSpans(t)
	e := runnertest.Start(t, quietRunner())
	h := startGateway(t, e, gateway.Options{RateRPS: 1000, RateBurst: 1000})
	runServer(t, e, "alpha", nil)
	h.waitTool(h.admin, "alpha__fail")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, era := range []string{"2025-11-25", ""} {
		for _, path := range []string{"fast", "go-sdk"} {
			tag := fmt.Sprintf("trace-test-fail era=%q path=%s", era, path)
			rt := &taggedRT{key: h.admin, tag: tag + " connect"}
			var opts *mcp.ClientSessionOptions
			if era != "" {
				opts = &mcp.ClientSessionOptions{ProtocolVersion: era}
			}
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx,
				&mcp.StreamableClientTransport{Endpoint: h.url + "/mcp", MaxRetries: -1, HTTPClient: &http.Client{Transport: rt}}, opts)
			if err != nil {
				t.Fatal(err)
			}
			p := &mcp.CallToolParams{Name: "alpha__fail", Arguments: map[string]any{"message": "boom"}}
			if path == "go-sdk" {
				p.Meta = mcp.Meta{"progressToken": "p1"}
			}
			rt.tag = tag
			if res, err := cs.CallTool(ctx, p); err != nil || !res.IsError {
				t.Fatalf("%s: tools/call alpha__fail: %v %+v, want an isError result", tag, err, res)
			}
			_ = cs.Close()
			var gw, run tracetest.SpanStub
			testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
				for _, s := range spans.exp.GetSpans() {
					if s.Name == "tools/call fail" && userAgent(httpSpanOf(spans, s)) == tag {
						run = s
						for p := s; p.Parent.IsValid(); {
							p, _ = spans.byID(p.Parent.SpanID())
							if p.Name == "tools/call alpha__fail" {
								gw = p
							}
						}
						return gw.Name != "", ""
					}
				}
				return false, tag + ": no tools/call fail under tools/call alpha__fail"
			})
			for _, s := range []tracetest.SpanStub{gw, run} {
				if s.Status.Code != codes.Error {
					t.Errorf("%s: span %q status %v, want Error", tag, s.Name, s.Status)
				}
				checkStubAttrs(t, tag, s, map[string]string{"error.type": "tool_error"})
			}
		}
	}
}
