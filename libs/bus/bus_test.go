package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/testkit"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
)

// --- headers and trace context ---

func TestHeaderCarrier(t *testing.T) {
	h := nats.Header{}
	c := bus.HeaderCarrier(h)
	c.Set("traceparent", "a")
	c.Set("X-Custom-Key", "b")
	if got := h["traceparent"]; len(got) != 1 || got[0] != "a" {
		t.Fatalf("Set did not keep the key as written: %v", h)
	}
	if _, ok := h["Traceparent"]; ok {
		t.Fatal("Set canonicalised the key")
	}
	for _, k := range []string{"traceparent", "Traceparent", "TRACEPARENT", "TraceParent"} {
		if got := c.Get(k); got != "a" {
			t.Errorf("Get(%q) = %q", k, got)
		}
	}
	if got := c.Get("x-custom-key"); got != "b" {
		t.Errorf("Get(lower) = %q", got)
	}
	if got := c.Get("missing"); got != "" {
		t.Errorf("Get(missing) = %q", got)
	}
	// An exact match wins over a case-insensitive one.
	h["Tracestate"] = []string{"other"}
	h["tracestate"] = []string{"exact"}
	if got := c.Get("tracestate"); got != "exact" {
		t.Errorf("exact match lost: %q", got)
	}
	// Keys with no values are skipped by the fallback.
	h2 := bus.HeaderCarrier(nats.Header{"Empty": nil, "EMPTY": {"v"}})
	if got := h2.Get("empty"); got != "v" {
		t.Errorf("Get skipped to an empty key: %q", got)
	}
	keys := c.Keys()
	slices.Sort(keys)
	if want := []string{"Tracestate", "X-Custom-Key", "traceparent", "tracestate"}; !slices.Equal(keys, want) {
		t.Errorf("Keys = %v, want %v", keys, want)
	}
	if len(bus.HeaderCarrier(nats.Header{}).Keys()) != 0 {
		t.Error("Keys of empty header")
	}
}

func remoteSpanContext(t *testing.T) trace.SpanContext {
	t.Helper()
	tid, err := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	if err != nil {
		t.Fatal(err)
	}
	sid, err := trace.SpanIDFromHex("00f067aa0ba902b7")
	if err != nil {
		t.Fatal(err)
	}
	ts, err := trace.ParseTraceState("vendor=opaque,other=1")
	if err != nil {
		t.Fatal(err)
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts})
}

func TestTraceRoundTrip(t *testing.T) {
	sc := remoteSpanContext(t)
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	member, err := baggage.NewMember("tenant", "acme")
	if err != nil {
		t.Fatal(err)
	}
	bag, err := baggage.New(member)
	if err != nil {
		t.Fatal(err)
	}
	ctx = baggage.ContextWithBaggage(ctx, bag)

	h := nats.Header{}
	bus.InjectTrace(ctx, h)
	if got := h.Get("traceparent"); got != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Fatalf("traceparent = %q (header %v)", got, h)
	}
	if got := h.Get("tracestate"); got != "vendor=opaque,other=1" {
		t.Fatalf("tracestate = %q", got)
	}

	out := bus.ExtractTrace(context.Background(), h)
	got := trace.SpanContextFromContext(out)
	if !got.IsValid() || !got.IsRemote() {
		t.Fatalf("extracted %+v", got)
	}
	if got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() || got.TraceFlags() != sc.TraceFlags() ||
		got.TraceState().String() != sc.TraceState().String() {
		t.Fatalf("extracted %v, want %v", got, sc)
	}
	if v := baggage.FromContext(out).Member("tenant").Value(); v != "acme" {
		t.Fatalf("baggage tenant = %q", v)
	}
}

func TestExtractTraceForeignCase(t *testing.T) {
	// Another client (or a textproto-based library) wrote the canonical MIME form.
	h := nats.Header{}
	h["Traceparent"] = []string{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	h["TRACESTATE"] = []string{"vendor=opaque"}
	sc := trace.SpanContextFromContext(bus.ExtractTrace(context.Background(), h))
	if !sc.IsValid() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" {
		t.Fatalf("extracted %v", sc)
	}
	if sc.TraceState().Get("vendor") != "opaque" {
		t.Fatalf("tracestate = %q", sc.TraceState().String())
	}
}

func TestExtractTraceNothing(t *testing.T) {
	type key struct{}
	base := context.WithValue(context.Background(), key{}, 1)
	if got := bus.ExtractTrace(base, nil); got != base {
		t.Error("nil header changed ctx")
	}
	for _, h := range []nats.Header{{}, {"traceparent": {"garbage"}}, {"traceparent": {"00-00000000000000000000000000000000-0000000000000000-01"}}} {
		if sc := trace.SpanContextFromContext(bus.ExtractTrace(base, h)); sc.IsValid() {
			t.Errorf("header %v gave a valid span context %v", h, sc)
		}
	}
	// Injecting without a span writes no traceparent.
	h := nats.Header{}
	bus.InjectTrace(context.Background(), h)
	if h.Get("traceparent") != "" {
		t.Errorf("traceparent without a span: %v", h)
	}
}

func TestInjectTraceMap(t *testing.T) {
	ctx := trace.ContextWithSpanContext(context.Background(), remoteSpanContext(t))
	m := map[string]any{"progressToken": "r1"}
	bus.InjectTraceMap(ctx, m)
	if m["traceparent"] != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" || m["progressToken"] != "r1" {
		t.Fatalf("meta = %v", m)
	}
	c := bus.MapCarrier(m)
	if c.Get("progressToken") != "r1" || c.Get("missing") != "" {
		t.Fatal("MapCarrier.Get")
	}
	m["num"] = 3
	if c.Get("num") != "" {
		t.Fatal("MapCarrier.Get of a non-string")
	}
	keys := c.Keys()
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"num", "progressToken", "traceparent", "tracestate"}) {
		t.Fatalf("Keys = %v", keys)
	}
}

func TestPrepareHeaders(t *testing.T) {
	ctx, cancel := context.WithTimeout(trace.ContextWithSpanContext(context.Background(), remoteSpanContext(t)), 5*time.Second)
	defer cancel()
	msg := nats.NewMsg("x")
	bus.PrepareHeaders(ctx, msg)
	if msg.Header.Get(bus.HeaderRequestID) == "" || msg.Header.Get("traceparent") == "" {
		t.Fatalf("headers %v", msg.Header)
	}
	ms, err := strconv.Atoi(msg.Header.Get(bus.HeaderTimeout))
	if err != nil || ms <= 0 || ms > 5000 {
		t.Fatalf("timeout header %q", msg.Header.Get(bus.HeaderTimeout))
	}
	msg2 := &nats.Msg{Subject: "x"}
	msg2.Header = nats.Header{bus.HeaderRequestID: {"keep-me"}}
	bus.PrepareHeaders(context.Background(), msg2)
	if msg2.Header.Get(bus.HeaderRequestID) != "keep-me" || msg2.Header.Get(bus.HeaderTimeout) != "" {
		t.Fatalf("headers %v", msg2.Header)
	}
	msg3 := &nats.Msg{Subject: "x"} // nil header
	bus.PrepareHeaders(context.Background(), msg3)
	if msg3.Header.Get(bus.HeaderRequestID) == "" || msg3.Header.Get(principal.Header) != "" {
		t.Fatalf("nil header not filled, or a principal from nowhere: %v", msg3.Header)
	}
	// The principal of the context replaces whatever the message said.
	msg4 := &nats.Msg{Subject: "x", Header: nats.Header{principal.Header: {principal.Operator().Encode()}}}
	bus.PrepareHeaders(principal.With(context.Background(), principal.Key("k1", false, model.ToolFilter{})), msg4)
	if p, err := principal.FromHeader(msg4.Header); err != nil || p.ID != "key:k1" {
		t.Fatalf("principal header %v: %+v %v", msg4.Header, p, err)
	}
}

// --- caller timeout ---

func TestCallerTimeout(t *testing.T) {
	cases := []struct {
		v    string
		want time.Duration
	}{
		{"", 0}, {"1500", 1500 * time.Millisecond}, {"1", time.Millisecond}, {"0", 0}, {"-5", 0},
		{"abc", 0}, {"1.5", 0}, {" 100", 0}, {"100ms", 0}, {"0x10", 0}, {"+7", 7 * time.Millisecond},
		{"99999999999999999999", 0}, // overflows int64
	}
	for _, tc := range cases {
		h := nats.Header{}
		if tc.v != "" {
			h.Set(bus.HeaderTimeout, tc.v)
		}
		if got := bus.CallerTimeout(h); got != tc.want {
			t.Errorf("CallerTimeout(%q) = %v, want %v", tc.v, got, tc.want)
		}
	}
	if bus.CallerTimeout(nil) != 0 {
		t.Error("nil header")
	}
	// Huge values must not wrap around into a short (or negative) timeout.
	for _, v := range []string{"9223372036854775807", "9223372036855", "18446744073709552"} {
		h := nats.Header{}
		h.Set(bus.HeaderTimeout, v)
		if got := bus.CallerTimeout(h); got != 0 && got < 24*time.Hour {
			t.Errorf("CallerTimeout(%q) = %v: wrapped around", v, got)
		}
	}
}

func FuzzCallerTimeout(f *testing.F) {
	for _, s := range []string{"", "0", "1", "30000", "-1", "abc", "1e3", "9223372036854775807", "9223372036855",
		"-9223372036854775808", "18446744073709551616", " 5", "5\n", "+0", "007", "٣"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		h := nats.Header{}
		h[bus.HeaderTimeout] = []string{v}
		got := bus.CallerTimeout(h)
		if got < 0 {
			t.Fatalf("CallerTimeout(%q) = %v < 0", v, got)
		}
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms <= 0 {
			if got != 0 {
				t.Fatalf("CallerTimeout(%q) = %v, want 0", v, got)
			}
			return
		}
		if ms <= math.MaxInt64/int64(time.Millisecond) {
			if got != time.Duration(ms)*time.Millisecond {
				t.Fatalf("CallerTimeout(%q) = %v", v, got)
			}
		} else if got != 0 && got < time.Duration(math.MaxInt64/int64(time.Millisecond))*time.Millisecond {
			t.Fatalf("CallerTimeout(%q) = %v: overflowed", v, got)
		}
	})
}

// --- subjects ---

func TestSubjects(t *testing.T) {
	if bus.NewSubjects("").Prefix != bus.DefaultPrefix || bus.DefaultPrefix != "mcp.v1" {
		t.Fatal("default prefix")
	}
	d := bus.NewSubjects("")
	if got := d.Call("github", "search_repos"); got != "mcp.v1.call.github.search_repos" {
		t.Errorf("Call = %q", got)
	}
	for _, prefix := range []string{"acme.mcp", "acme.mcp."} {
		s := bus.NewSubjects(prefix)
		if s.Prefix != "acme.mcp" {
			t.Fatalf("Prefix = %q", s.Prefix)
		}
		want := map[string]string{
			s.Call("fs", "read_file"):    "acme.mcp.call.fs.read_file",
			s.CallAll("fs"):              "acme.mcp.call.fs.*",
			s.ToolsList():                "acme.mcp.tools.list",
			s.RPC("fs"):                  "acme.mcp.rpc.fs",
			s.Cancel("fs"):               "acme.mcp.cancel.fs",
			s.Control("fs"):              "acme.mcp.control.fs",
			s.ControlAll("fs"):           "acme.mcp.control.fs.all",
			s.Runtime("restart"):         "acme.mcp.runtime.restart",
			s.Service("config", "list"):  "acme.mcp.config.list",
			s.Event("status", "fs"):      "acme.mcp.events.status.fs",
			s.Events():                   "acme.mcp.events.>",
			s.EventsOf("call"):           "acme.mcp.events.call.*",
			s.Service("cred", "resolve"): "acme.mcp.cred.resolve",
		}
		for got, w := range want {
			if got != w {
				t.Errorf("got %q, want %q", got, w)
			}
		}
	}
	if bus.QueueGroup("fs") != "mcp.fs" {
		t.Errorf("QueueGroup = %q", bus.QueueGroup("fs"))
	}
}

func TestTokenAt(t *testing.T) {
	cases := []struct {
		subject string
		n       int
		want    string
	}{
		{"mcp.v1.call.fs.read", 0, "mcp"},
		{"mcp.v1.call.fs.read", 2, "call"},
		{"mcp.v1.call.fs.read", 3, "fs"},
		{"mcp.v1.call.fs.read", 4, "read"},
		{"mcp.v1.call.fs.read", 5, ""},
		{"mcp.v1.call.fs.read", 50, ""},
		{"single", 0, "single"},
		{"single", 1, ""},
		{"", 0, ""},
		{"a..b", 1, ""},
		{"a..b", 2, "b"},
		{"trailing.", 1, ""},
		{".lead", 0, ""},
		{"a.b", -1, "a"},
	}
	for _, tc := range cases {
		if got := bus.TokenAt(tc.subject, tc.n); got != tc.want {
			t.Errorf("TokenAt(%q, %d) = %q, want %q", tc.subject, tc.n, got, tc.want)
		}
	}
	// Consistent with strings.Split for every index.
	s := bus.NewSubjects("x.y").Event("chat", "sess-1")
	for i, part := range strings.Split(s, ".") {
		if got := bus.TokenAt(s, i); got != part {
			t.Errorf("TokenAt(%q, %d) = %q, want %q", s, i, got, part)
		}
	}
}

// --- error replies ---

func TestErrorMsgSingleLine(t *testing.T) {
	m := bus.ErrorMsg(apierr.Newf(apierr.NotFound, "line one\nline two\r\nline three"))
	if got := m.Header.Get(bus.HeaderErrorCode); got != "404" {
		t.Errorf("code header = %q", got)
	}
	text := m.Header.Get(bus.HeaderError)
	if strings.ContainsAny(text, "\r\n") {
		t.Errorf("error header has a line break: %q", text)
	}
	if !strings.Contains(text, "line one") || !strings.Contains(text, "line three") {
		t.Errorf("error header lost text: %q", text)
	}
	// The body keeps the message as it was.
	e, ok := apierr.Parse(m.Data)
	if !ok || e.Message != "line one\nline two\r\nline three" || e.Code != apierr.NotFound {
		t.Errorf("body = %s", m.Data)
	}
	// A long message is cut in the header, not in the body.
	long := strings.Repeat("x", 5000)
	m = bus.ErrorMsg(errors.New(long))
	if n := len(m.Header.Get(bus.HeaderError)); n > 1024 {
		t.Errorf("header is %d bytes", n)
	}
	if e, _ := apierr.Parse(m.Data); e == nil || e.Message != long || e.Code != apierr.Internal {
		t.Errorf("long body lost")
	}
	// And ReplyError reads it back.
	if e := bus.ReplyError(m); e == nil || e.Message != long {
		t.Errorf("ReplyError(ErrorMsg) = %v", e)
	}
}

func TestReplyError(t *testing.T) {
	if bus.ReplyError(nil) != nil {
		t.Error("nil msg")
	}
	ok := &nats.Msg{Data: []byte(`{"content":[]}`)}
	if bus.ReplyError(ok) != nil {
		t.Error("success without headers")
	}
	ok.Header = nats.Header{bus.HeaderRequestID: {"r"}}
	if bus.ReplyError(ok) != nil {
		t.Error("success with headers")
	}
	// A success body that happens to look like an error is still a success.
	lookalike := &nats.Msg{Header: nats.Header{"X": {"1"}}, Data: []byte(`{"code":"NOT_FOUND","message":"a tool's own output"}`)}
	if bus.ReplyError(lookalike) != nil {
		t.Error("error-shaped body without the error header")
	}

	ours := bus.ErrorMsg(apierr.Invalid("arguments", "arguments must be a JSON object"))
	e := bus.ReplyError(ours)
	if e == nil || e.Code != apierr.Validation || e.Field != "arguments" || e.Message != "arguments must be a JSON object" {
		t.Errorf("ours = %+v", e)
	}

	foreign := []struct {
		status, text string
		body         []byte
		code         apierr.Code
		msg          string
	}{
		{"503", "busy", nil, apierr.ServiceUnavailable, "busy"},
		{"404", "nope", []byte("plain text"), apierr.NotFound, "nope"},
		{"429", "", nil, apierr.RateLimited, "service error 429"},
		{"500", "boom", []byte(`{"code":"NOT_FOUND"}`), apierr.Internal, "boom"},
		{"418", "teapot", nil, apierr.Internal, "teapot"},
		{"E_WEIRD", "weird", nil, apierr.Internal, "weird"},
		{"400", "bad", []byte(`{"error":"x"}`), apierr.Validation, "bad"},
	}
	for _, tc := range foreign {
		m := &nats.Msg{Header: nats.Header{}, Data: tc.body}
		m.Header.Set(bus.HeaderErrorCode, tc.status)
		if tc.text != "" {
			m.Header.Set(bus.HeaderError, tc.text)
		}
		e := bus.ReplyError(m)
		if e == nil || e.Code != tc.code || e.Message != tc.msg {
			t.Errorf("status %s text %q: got %+v, want %s %q", tc.status, tc.text, e, tc.code, tc.msg)
		}
	}
}

// TestReplyErrorOverNATS checks the micro error convention end to end: our
// RespondError, a foreign micro service's numeric error, and a success.
func TestReplyErrorOverNATS(t *testing.T) {
	ns := testkit.NATS(t)
	nc := testkit.Connect(t, ns)

	var seenTrace, seenTimeout string
	svc, err := micro.AddService(nc, micro.Config{Name: "bustest", Version: "0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	add := func(name string, h micro.HandlerFunc) {
		if err := svc.AddEndpoint(name, h, micro.WithEndpointSubject("bustest."+name)); err != nil {
			t.Fatal(err)
		}
	}
	add("ours", func(r micro.Request) {
		_ = bus.RespondError(r, fmt.Errorf("wrapped: %w", apierr.Invalid("name", "Name is required\nreally")))
	})
	add("foreign", func(r micro.Request) { _ = r.Error("503", "backend overloaded", nil) })
	add("ok", func(r micro.Request) {
		h := nats.Header(r.Headers())
		seenTrace, seenTimeout = h.Get("traceparent"), h.Get(bus.HeaderTimeout)
		_ = r.RespondJSON(map[string]string{"hello": "world"})
	})
	// A responder outside micro answers with ErrorMsg.
	sub, err := nc.Subscribe("bustest.plain", func(m *nats.Msg) { _ = m.RespondMsg(bus.ErrorMsg(apierr.New(apierr.Conflict, "taken"))) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })

	ctx, cancel := context.WithTimeout(trace.ContextWithSpanContext(context.Background(), remoteSpanContext(t)), 5*time.Second)
	defer cancel()

	_, err = bus.Request(ctx, nc, nats.NewMsg("bustest.ours"), 0)
	var e *apierr.Error
	if !errors.As(err, &e) || e.Code != apierr.Validation || e.Field != "name" || e.Message != "Name is required\nreally" {
		t.Fatalf("ours: %v", err)
	}
	_, err = bus.Request(ctx, nc, nats.NewMsg("bustest.foreign"), 0)
	if !errors.As(err, &e) || e.Code != apierr.ServiceUnavailable || e.Message != "backend overloaded" {
		t.Fatalf("foreign: %v", err)
	}
	var out map[string]string
	if err := bus.RequestJSON(ctx, nc, "bustest.ok", map[string]int{"a": 1}, &out, 0); err != nil || out["hello"] != "world" {
		t.Fatalf("ok: %v %v", out, err)
	}
	if !strings.Contains(seenTrace, "4bf92f3577b34da6a3ce929d0e0e4736") || seenTimeout == "" {
		t.Fatalf("service saw traceparent %q, timeout %q", seenTrace, seenTimeout)
	}
	if err := bus.RequestJSON(ctx, nc, "bustest.plain", nil, nil, 0); apierr.Of(err) != apierr.Conflict {
		t.Fatalf("plain: %v", err)
	}
	err = bus.RequestJSON(context.Background(), nc, "bustest.nobody", nil, nil, time.Second)
	if apierr.Of(err) != apierr.ServiceUnavailable || !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("no responders: %v", err)
	}
	if err := bus.RequestJSON(ctx, nc, "bustest.ok", nil, &struct{ Hello int }{}, 0); apierr.Of(err) != apierr.Internal {
		t.Fatalf("undecodable reply: %v", err)
	}
	if err := bus.RequestJSON(ctx, nc, "bustest.ok", make(chan int), nil, 0); apierr.Of(err) != apierr.Validation {
		t.Fatalf("unencodable request: %v", err)
	}
}

func TestFromNATS(t *testing.T) {
	if bus.FromNATS(nil, "s") != nil {
		t.Error("nil")
	}
	cases := map[error]apierr.Code{
		nats.ErrNoResponders:                      apierr.ServiceUnavailable,
		fmt.Errorf("x: %w", nats.ErrTimeout):      apierr.Network,
		nats.ErrConnectionClosed:                  apierr.Network,
		nats.ErrConnectionDraining:                apierr.Network,
		errors.New("something else from nats.go"): apierr.Internal,
	}
	for in, want := range cases {
		got := bus.FromNATS(in, "mcp.v1.x")
		if apierr.Of(got) != want || !errors.Is(got, in) {
			t.Errorf("FromNATS(%v) = %v, want %s", in, got, want)
		}
	}
}

func FuzzReplyError(f *testing.F) {
	f.Add("", "", []byte(nil))
	f.Add("400", "bad", []byte(`{"code":"VALIDATION_ERROR","message":"bad","field":"x"}`))
	f.Add("503", "", []byte(nil))
	f.Add("503", "busy", []byte("not json"))
	f.Add("abc", "x\ny", []byte(`{"code":"NOPE","message":"m"}`))
	f.Add("-1", "\x00", []byte(`{"code":"NOT_FOUND"}`))
	f.Add("99999999999999999999", "", []byte(`{}`))
	f.Add("404", strings.Repeat("é", 600), []byte(`{"code":"NOT_FOUND","message":"\ud800"}`))
	f.Add(" 500", "m", []byte("\xff\xfe"))
	f.Fuzz(func(t *testing.T, status, text string, body []byte) {
		m := &nats.Msg{Header: nats.Header{}, Data: body}
		if status != "" {
			m.Header[bus.HeaderErrorCode] = []string{status}
		}
		if text != "" {
			m.Header[bus.HeaderError] = []string{text}
		}
		e := bus.ReplyError(m)
		if status == "" {
			if e != nil {
				t.Fatalf("no status but error %+v", e)
			}
			return
		}
		if e == nil {
			t.Fatal("status header but no error")
		}
		if !e.Code.Valid() || e.Message == "" {
			t.Fatalf("invalid error %+v", e)
		}
		// Whatever came in, the error re-sends as a well-formed reply.
		out := bus.ErrorMsg(e)
		if strings.ContainsAny(out.Header.Get(bus.HeaderError), "\r\n") {
			t.Fatalf("multi-line header %q", out.Header.Get(bus.HeaderError))
		}
		back := bus.ReplyError(out)
		if back == nil || back.Code != e.Code || back.Field != e.Field {
			t.Fatalf("re-sent %+v came back as %+v", e, back)
		}
		var v map[string]any
		if err := json.Unmarshal(out.Data, &v); err != nil {
			t.Fatalf("body %q: %v", out.Data, err)
		}
	})
}

func TestDecodeRefusesTrailingData(t *testing.T) {
	var v struct {
		A int `json:"a"`
	}
	for _, body := range []string{`{}}`, `{"a":1} {}`, `{"a":1}]`, `{"a":1} x`, `{"b":1}`} {
		if err := bus.Decode([]byte(body), &v); apierr.Of(err) != apierr.Validation {
			t.Errorf("%s: %v, want VALIDATION_ERROR", body, err)
		}
	}
	for _, body := range []string{`{"a":1}`, " {\"a\":1} \n", ``} {
		if err := bus.Decode([]byte(body), &v); err != nil {
			t.Errorf("%q: %v", body, err)
		}
	}
}
