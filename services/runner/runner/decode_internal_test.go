package runner

// Internal tests of the decoders of bus input: call arguments, rpc, control
// and cancel bodies. They need no NATS and no MCP server: a server that is
// not running answers every well-formed request with SERVICE_UNAVAILABLE.

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// isJSONSpace reports whether b is whitespace as JSON defines it.
func isJSONSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\r' || b == '\n' }

// sentArguments is what call() hands to the MCP server for accepted args.
func sentArguments(args []byte) []byte {
	if len(trimJSONSpace(args)) == 0 {
		return emptyObject
	}
	return args
}

func checkAccepted(t *testing.T, args []byte, max int) {
	t.Helper()
	if len(args) > max {
		t.Fatalf("accepted %d bytes over the limit %d", len(args), max)
	}
	sent := sentArguments(args)
	if !json.Valid(sent) {
		t.Fatalf("accepted %q, which is sent as invalid JSON %q", args, sent)
	}
	i := 0
	for i < len(sent) && isJSONSpace(sent[i]) {
		i++
	}
	if i == len(sent) || sent[i] != '{' {
		t.Fatalf("accepted %q, which is not a JSON object", args)
	}
}

func TestCheckArgs(t *testing.T) {
	accept := []string{
		"", " ", "\n\t\r ", "{}", ` {"a":1} `, "\n{\"path\":\"/tmp\",\"nested\":{\"x\":[1,2,null]}}\n",
		`{"unicode":"✓ \u2028","esc":"\"\\"}`, `{"a":1,"a":2}`,
	}
	for _, a := range accept {
		if err := checkArgs([]byte(a), 1024); err != nil {
			t.Errorf("checkArgs(%q) = %v", a, err)
			continue
		}
		checkAccepted(t, []byte(a), 1024)
	}
	reject := []string{
		"[]", "null", "1", `"str"`, "true", "{", `{"a":}`, `{"a":1}{}`, `{"a":1} x`, "{}\x00", "\x00{}",
		"\xef\xbb\xbf{}",       // UTF-8 BOM
		"\u00a0{}",             // NO-BREAK SPACE is not JSON whitespace
		"\u0085{}",             // NEL
		"{}\u2028",             // LINE SEPARATOR after the object
		"\u00a0", "\u3000\n\t", // Unicode-only spaces are not an empty body
		`{'a':1}`, `{a:1}`, "{\"a\":\"\xff\"", "\x1f{}",
	}
	for _, a := range reject {
		err := checkArgs([]byte(a), 1024)
		var e *apierr.Error
		if !errors.As(err, &e) || e.Code != apierr.Validation || e.Field != "arguments" || e.Message != "arguments must be a JSON object" {
			t.Errorf("checkArgs(%q) = %v, want VALIDATION_ERROR on arguments", a, err)
		}
	}
	big := []byte(`{"data":"` + strings.Repeat("x", 100) + `"}`)
	err := checkArgs(big, 50)
	var e *apierr.Error
	if !errors.As(err, &e) || e.Code != apierr.Validation || !strings.Contains(e.Message, "over the limit of 50") {
		t.Errorf("oversized = %v", err)
	}
	if err := checkArgs(big, len(big)); err != nil {
		t.Errorf("exactly at the limit: %v", err)
	}
	// The limit counts the raw body, whitespace included.
	if err := checkArgs([]byte(strings.Repeat(" ", 51)), 50); err == nil {
		t.Error("51 spaces passed a limit of 50")
	}
}

func FuzzCheckArgs(f *testing.F) {
	for _, s := range []string{
		"", "   ", "{}", `{"path":"/tmp","recursive":true}`, `{"q":"\u0000\ud800"}`, "[1,2]", "null", "{", "}{",
		"\u00a0{}", "\u0085{}", "\xef\xbb\xbf{}", "{}\u2028", "\u00a0", "{\"a\":\"\xff\"}", "{\"a\":1}\n\n",
		strings.Repeat("{\"a\":", 200) + "1" + strings.Repeat("}", 200), strings.Repeat("[", 10000),
	} {
		f.Add([]byte(s), uint16(1024))
	}
	f.Add([]byte(`{"a":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"}`), uint16(16))
	f.Add([]byte(`{}`), uint16(0))
	f.Fuzz(func(t *testing.T, args []byte, limit uint16) {
		max := int(limit)
		err := checkArgs(args, max)
		if err != nil {
			var e *apierr.Error
			if !errors.As(err, &e) || e.Code != apierr.Validation || e.Field != "arguments" {
				t.Fatalf("checkArgs(%q) = %v", args, err)
			}
			return
		}
		checkAccepted(t, args, max)
	})
}

// --- a server that is not running, with a fake micro request ---

type fakeRequest struct {
	data    []byte
	headers micro.Headers
	subject string
	reply   string

	responses int
	body      []byte
	errCode   string
	errText   string
}

func (r *fakeRequest) Respond(data []byte, opts ...micro.RespondOpt) error {
	r.responses++
	r.body = data
	// Error replies carry the micro error headers (bus.RespondError sets them
	// through micro.WithHeaders): apply the options as micro would.
	m := &nats.Msg{}
	for _, o := range opts {
		o(m)
	}
	r.errCode, r.errText = m.Header.Get(bus.HeaderErrorCode), m.Header.Get(bus.HeaderError)
	return nil
}

func (r *fakeRequest) RespondJSON(v any, _ ...micro.RespondOpt) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return r.Respond(b)
}

func (r *fakeRequest) Error(code, description string, data []byte, _ ...micro.RespondOpt) error {
	r.responses++
	r.errCode, r.errText, r.body = code, description, data
	return nil
}

func (r *fakeRequest) Data() []byte           { return r.data }
func (r *fakeRequest) Headers() micro.Headers { return r.headers }
func (r *fakeRequest) Subject() string        { return r.subject }
func (r *fakeRequest) Reply() string          { return r.reply }

// replyError reads the fake's error reply the way a client would.
func (r *fakeRequest) replyError() *apierr.Error {
	if r.errCode == "" {
		return nil
	}
	m := &nats.Msg{Header: nats.Header{bus.HeaderErrorCode: {r.errCode}, bus.HeaderError: {r.errText}}, Data: r.body}
	return bus.ReplyError(m)
}

// stoppedServer is a server that was never started and is no longer managed:
// live() answers SERVICE_UNAVAILABLE and do() returns at once.
func stoppedServer() *server {
	done := make(chan struct{})
	close(done)
	ctx, cancel := context.WithCancel(context.Background())
	guard, err := newSecretGuard()
	if err != nil {
		panic(err)
	}
	// A runner always has its secret guard (New): rpc scans a request's
	// params before it looks at the server's state.
	r := &Runner{opts: Options{ID: "runner-1", CallTimeout: 1e9, MaxArgsBytes: 1024}, subj: bus.NewSubjects(""), telemetry: newCallTelemetry(), secrets: guard}
	return &server{
		r: r, slug: "fs", log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		ctx: ctx, cancel: cancel, done: done, // ops is nil: do() always sees done
		cfg: &model.McpConfig{Slug: "fs"}, state: model.StateStopped, booted: true,
		callPrefix: r.subj.Call("fs", ""),
	}
}

func TestCallOnStoppedServer(t *testing.T) {
	s := stoppedServer()
	defer s.cancel()
	h := nats.Header{}
	// Bad arguments are rejected before the server state is looked at.
	if _, _, err := s.call(context.Background(), caller{}, h, "read", []byte("[1]")); apierr.Of(err) != apierr.Validation {
		t.Fatalf("bad args: %v", err)
	}
	_, _, err := s.call(context.Background(), caller{}, h, "read", []byte(`{"path":"/"}`))
	if apierr.Of(err) != apierr.ServiceUnavailable || !strings.Contains(err.Error(), "server fs is stopped") {
		t.Fatalf("stopped: %v", err)
	}
	s.state, s.lastErr = model.StateError, apierr.New(apierr.NotFound, "Package not found")
	if _, _, err := s.call(context.Background(), caller{}, h, "read", nil); !strings.Contains(err.Error(), "in error: Package not found") {
		t.Fatalf("error state: %v", err)
	}
	// A starting or idle server makes the call wait for its start; this one
	// is no longer managed, so the wait ends at once.
	s.state, s.lastErr = model.StateStarting, nil
	if _, _, err := s.call(context.Background(), caller{}, h, "read", nil); apierr.Of(err) != apierr.ServiceUnavailable || !strings.Contains(err.Error(), "no longer managed") {
		t.Fatalf("starting: %v", err)
	}
	// An idle server knows its tools from the catalog: an unknown one is NOT_FOUND without a start.
	s.state, s.tools = model.StateIdle, map[string]*mcp.Tool{"read": {Name: "read"}}
	if _, _, err := s.call(context.Background(), caller{}, h, "write", nil); apierr.Of(err) != apierr.NotFound {
		t.Fatalf("idle, unknown tool: %v", err)
	}
}

func TestRPCDecoding(t *testing.T) {
	s := stoppedServer()
	defer s.cancel()
	cases := []struct {
		body  string
		code  apierr.Code
		field string
	}{
		{``, apierr.Validation, ""},
		{`[]`, apierr.Validation, ""},
		{`{"method":1}`, apierr.Validation, ""},
		{`{}`, apierr.Validation, "method"},
		{`{"method":""}`, apierr.Validation, "method"},
		{`null`, apierr.Validation, "method"},
		{`{"method":"ping"}`, apierr.ServiceUnavailable, ""},
		{`{"method":"resources/list","params":{}}`, apierr.ServiceUnavailable, ""},
		{`{"method":"tools/call"}`, apierr.Validation, "method"}, // an unsupported method is refused before the state is looked at
	}
	for _, tc := range cases {
		_, err := s.rpc(context.Background(), caller{}, nats.Header{}, []byte(tc.body))
		var e *apierr.Error
		if !errors.As(err, &e) || e.Code != tc.code || e.Field != tc.field {
			t.Errorf("rpc(%s) = %v, want %s field %q", tc.body, err, tc.code, tc.field)
		}
	}
	// Through the handler: a well-formed error reply.
	req := &fakeRequest{data: []byte(`{"method":""}`), headers: micro.Headers{}}
	s.handleRPC(req)
	if e := req.replyError(); req.responses != 1 || e == nil || e.Code != apierr.Validation || req.errCode != "400" {
		t.Fatalf("handleRPC reply %d %q %v", req.responses, req.errCode, e)
	}
}

func FuzzRPCRequest(f *testing.F) {
	for _, s := range []string{
		`{"method":"ping"}`, `{"method":"resources/read","params":{"uri":"file:///etc/passwd"}}`,
		`{"method":"prompts/get","params":{"name":"p","arguments":{"a":"b"}}}`, `{"method":"completion/complete","params":{"ref":{"type":"ref/prompt","name":"p"},"argument":{"name":"a","value":"b"}}}`,
		`{"method":"nope"}`, `{"method":""}`, `{}`, `null`, `[]`, ``, `{"method":"ping","params":null}`, `{"method":"\u0000"}`,
		`{"method":"tools/list","params":"x"}`, "{\"method\":\"\xff\"}",
	} {
		f.Add([]byte(s), "")
	}
	f.Add([]byte(`{"method":"ping"}`), "50")
	f.Add([]byte(`{"method":"ping"}`), "9223372036854775807")
	s := stoppedServer()
	f.Cleanup(s.cancel)
	f.Fuzz(func(t *testing.T, data []byte, timeout string) {
		h := nats.Header{}
		if timeout != "" {
			h[bus.HeaderTimeout] = []string{timeout}
		}
		out, err := s.rpc(context.Background(), caller{}, h, data)
		if err == nil {
			t.Fatalf("rpc on a stopped server succeeded: %v", out)
		}
		var e *apierr.Error
		if !errors.As(err, &e) || (e.Code != apierr.Validation && e.Code != apierr.ServiceUnavailable) {
			t.Fatalf("rpc(%q) = %T %v", data, err, err)
		}
		req := &fakeRequest{data: data, headers: micro.Headers(h)}
		s.handleRPC(req)
		if req.responses != 1 || req.replyError() == nil {
			t.Fatalf("handleRPC(%q): %d responses, %q", data, req.responses, req.errCode)
		}
	})
}

// rpcCall is generic over the go-sdk parameter types; check the ones the
// rpc subject serves with a function that only records what it got.
func rpcCallAll(raw json.RawMessage) (calls int, errs []error) {
	ctx := context.Background()
	record := func(p any) { calls++; _ = p }
	var err error
	_, err = rpcCall(ctx, raw, func(_ context.Context, p *mcp.ListToolsParams) (*mcp.ListToolsResult, error) {
		record(p)
		return &mcp.ListToolsResult{}, nil
	})
	errs = append(errs, err)
	_, err = rpcCall(ctx, raw, func(_ context.Context, p *mcp.ReadResourceParams) (*mcp.ReadResourceResult, error) {
		record(p)
		return &mcp.ReadResourceResult{}, nil
	})
	errs = append(errs, err)
	_, err = rpcCall(ctx, raw, func(_ context.Context, p *mcp.GetPromptParams) (*mcp.GetPromptResult, error) {
		record(p)
		return &mcp.GetPromptResult{}, nil
	})
	errs = append(errs, err)
	_, err = rpcCall(ctx, raw, func(_ context.Context, p *mcp.CompleteParams) (*mcp.CompleteResult, error) {
		record(p)
		return &mcp.CompleteResult{}, nil
	})
	errs = append(errs, err)
	_, err = rpcCall(ctx, raw, func(_ context.Context, p *mcp.ListResourceTemplatesParams) (*mcp.ListResourceTemplatesResult, error) {
		record(p)
		return &mcp.ListResourceTemplatesResult{}, nil
	})
	errs = append(errs, err)
	return calls, errs
}

func TestRPCCallParams(t *testing.T) {
	var got *mcp.ReadResourceParams
	_, err := rpcCall(context.Background(), json.RawMessage(`{"uri":"file:///tmp/x"}`),
		func(_ context.Context, p *mcp.ReadResourceParams) (*mcp.ReadResourceResult, error) {
			got = p
			return nil, nil
		})
	if err != nil || got == nil || got.URI != "file:///tmp/x" {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	// Absent, blank and null params give a zero value, never nil.
	for _, raw := range []string{"", "  ", "null", " null\n"} {
		got = nil
		_, err := rpcCall(context.Background(), json.RawMessage(raw),
			func(_ context.Context, p *mcp.ReadResourceParams) (*mcp.ReadResourceResult, error) {
				got = p
				return nil, nil
			})
		if err != nil || got == nil || got.URI != "" {
			t.Errorf("params %q: %+v, %v", raw, got, err)
		}
	}
	// The function's own error passes through untouched.
	boom := errors.New("boom")
	_, err = rpcCall(context.Background(), nil, func(context.Context, *mcp.ListToolsParams) (*mcp.ListToolsResult, error) { return nil, boom })
	if err != boom {
		t.Fatalf("function error = %v", err)
	}
	for _, raw := range []string{`"x"`, `[1]`, `{"uri":1}`, `{`, `{"name":{"a":1}}`} {
		calls, errs := rpcCallAll(json.RawMessage(raw))
		failed := 0
		for _, err := range errs {
			if err != nil {
				failed++
				var e *apierr.Error
				if !errors.As(err, &e) || e.Code != apierr.Validation || e.Field != "params" {
					t.Errorf("params %s: %v", raw, err)
				}
			}
		}
		if failed == 0 || calls+failed != len(errs) {
			t.Errorf("params %s: %d calls, %d errors", raw, calls, failed)
		}
	}
}

func FuzzRPCCallParams(f *testing.F) {
	for _, s := range []string{
		``, `null`, `{}`, `{"uri":"file:///x"}`, `{"name":"p","arguments":{"k":"v"}}`, `{"cursor":"abc"}`,
		`{"ref":{"type":"ref/prompt","name":"p"},"argument":{"name":"a","value":"b"}}`,
		`{"ref":{"type":"ref/resource","uri":"x"},"argument":{"name":"a","value":"b"},"context":{"arguments":{"x":"y"}}}`,
		`{"ref":{"type":"bogus"}}`, `{"ref":null}`, `{"_meta":{"progressToken":1}}`, `{"_meta":[]}`,
		`{"arguments":{"k":1}}`, `[]`, `"s"`, `1e999`, "{\"uri\":\"\xff\"}", `{"ref":{"type":"ref/prompt"},"argument":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		calls, errs := rpcCallAll(json.RawMessage(raw))
		n := 0
		for _, err := range errs {
			if err == nil {
				continue
			}
			n++
			var e *apierr.Error
			if !errors.As(err, &e) || e.Code != apierr.Validation || e.Field != "params" {
				t.Fatalf("params %q: %T %v", raw, err, err)
			}
		}
		if calls+n != len(errs) {
			t.Fatalf("params %q: %d calls and %d errors of %d", raw, calls, n, len(errs))
		}
	})
}

func TestControlDecoding(t *testing.T) {
	s := stoppedServer()
	defer s.cancel()
	cases := []struct {
		body string
		code apierr.Code // "" for a status reply
	}{
		{`{"verb":"status"}`, ""},
		{`{"verb":"status","extra":1}`, ""},
		{`{"verb":"start"}`, apierr.ServiceUnavailable}, // no longer managed here
		{`{"verb":"stop"}`, apierr.ServiceUnavailable},
		{`{"verb":"restart"}`, apierr.ServiceUnavailable},
		{`{"verb":"STATUS"}`, apierr.Validation},
		{`{"verb":""}`, apierr.Validation},
		{`{}`, apierr.Validation},
		{`null`, apierr.Validation},
		{`{"verb":1}`, apierr.Validation},
		{``, apierr.Validation},
		{`status`, apierr.Validation},
	}
	for _, tc := range cases {
		req := &fakeRequest{data: []byte(tc.body), headers: micro.Headers{}}
		s.handleControl(req)
		if req.responses != 1 {
			t.Errorf("%s: %d responses", tc.body, req.responses)
			continue
		}
		e := req.replyError()
		if tc.code == "" {
			var st model.Status
			if e != nil || json.Unmarshal(req.body, &st) != nil || st.Server != "fs" || st.State != model.StateStopped || st.Runner != "runner-1" {
				t.Errorf("%s: reply %s, error %v", tc.body, req.body, e)
			}
			continue
		}
		if e == nil || e.Code != tc.code || req.errCode != strconv.Itoa(tc.code.HTTPStatus()) {
			t.Errorf("%s: got %v (%s), want %s", tc.body, e, req.errCode, tc.code)
		}
		if tc.code == apierr.Validation && e.Field != "verb" {
			t.Errorf("%s: field %q", tc.body, e.Field)
		}
	}
}

func TestCancelDecoding(t *testing.T) {
	s := stoppedServer()
	defer s.cancel()
	var cancelled atomic.Int32
	s.inflight.Store("req-1", context.CancelFunc(func() { cancelled.Add(1) }))
	for _, body := range []string{``, `null`, `{}`, `{"request_id":""}`, `{"request_id":1}`, `{"request_id":"req-2"}`, `"req-1"`, `[{"request_id":"req-1"}]`} {
		s.handleCancel(&fakeRequest{data: []byte(body)})
	}
	if cancelled.Load() != 0 {
		t.Fatal("a wrong body cancelled the call")
	}
	req := &fakeRequest{data: []byte(`{"request_id":"req-1"}`), reply: "_INBOX.x"}
	s.handleCancel(req)
	if cancelled.Load() != 1 || req.responses != 1 || string(req.body) != "{}" {
		t.Fatalf("cancel: %d cancelled, %d responses %s", cancelled.Load(), req.responses, req.body)
	}
	// Without a reply subject (a plain publish) nothing is answered.
	req = &fakeRequest{data: []byte(`{"request_id":"req-1","extra":true}`)}
	s.handleCancel(req)
	if cancelled.Load() != 2 || req.responses != 0 {
		t.Fatalf("publish cancel: %d, %d", cancelled.Load(), req.responses)
	}
}

func FuzzControlAndCancel(f *testing.F) {
	for _, s := range []string{
		`{"verb":"status"}`, `{"verb":"start"}`, `{"verb":"bogus"}`, `{"request_id":"req-1"}`, `{"request_id":"req-1","verb":"stop"}`,
		``, `null`, `{`, `[]`, `{"verb":null,"request_id":null}`, "{\"verb\":\"\xff\"}", `{"Verb":"status","REQUEST_ID":"req-1"}`,
	} {
		f.Add([]byte(s))
	}
	s := stoppedServer()
	f.Cleanup(s.cancel)
	f.Fuzz(func(t *testing.T, data []byte) {
		req := &fakeRequest{data: data, headers: micro.Headers{}}
		s.handleControl(req)
		if req.responses != 1 {
			t.Fatalf("control %q: %d responses", data, req.responses)
		}
		if e := req.replyError(); e != nil && e.Code != apierr.Validation && e.Code != apierr.ServiceUnavailable {
			t.Fatalf("control %q: %v", data, e)
		}
		var hit atomic.Bool
		s.inflight.Store("req-1", context.CancelFunc(func() { hit.Store(true) }))
		defer s.inflight.Delete("req-1")
		creq := &fakeRequest{data: data, reply: "_INBOX.y"}
		s.handleCancel(creq)
		var in cancelRequest
		want := json.Unmarshal(data, &in) == nil && in.RequestID == "req-1"
		if hit.Load() != want {
			t.Fatalf("cancel %q: cancelled %v, want %v", data, hit.Load(), want)
		}
		if creq.responses > 1 || (creq.responses == 1) != (json.Unmarshal(data, &in) == nil && in.RequestID != "") {
			t.Fatalf("cancel %q: %d responses", data, creq.responses)
		}
	})
}

// An rpc request reaches the MCP server with the trace context of the
// runner's span in its _meta (resources and prompts are traced as calls
// are), replacing any the caller wrote there.
func TestRPCParamsCarryTheRunnersTrace(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	raw := json.RawMessage(`{"uri":"test://greeting","_meta":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","tracestate":"x=y","keep":"me"}}`)
	var got mcp.Meta
	if _, err := rpcCall(ctx, raw, func(_ context.Context, p *mcp.ReadResourceParams) (*mcp.ReadResourceResult, error) {
		got = p.Meta
		return &mcp.ReadResourceResult{}, nil
	}); err != nil {
		t.Fatal(err)
	}
	want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
	if got["traceparent"] != want || got["keep"] != "me" {
		t.Errorf("_meta %v: want traceparent %s and the caller's other members", got, want)
	}
	if _, ok := got["tracestate"]; ok {
		t.Errorf("_meta %v kept the caller's tracestate", got)
	}
	// A prompt with no _meta gets one.
	if _, err := rpcCall(ctx, json.RawMessage(`{"name":"greet"}`), func(_ context.Context, p *mcp.GetPromptParams) (*mcp.GetPromptResult, error) {
		got = p.Meta
		return &mcp.GetPromptResult{}, nil
	}); err != nil || got["traceparent"] != want {
		t.Errorf("prompts/get _meta %v, %v: want traceparent %s", got, err, want)
	}
}
