package mcpserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/gateway/mcpserver"
)

// rawPost POSTs one JSON-RPC body on a session (see rawWith) and returns
// the status, Content-Type and body.
func rawPost(t *testing.T, url, sid, body string, hdr map[string]string) (int, string, string) {
	t.Helper()
	r := rawWith(t, url, "", sid, body, hdr)
	return r.status, r.ctype, r.body
}

// outcome is what a client sees of one call, comparable across paths.
type outcome struct {
	Result json.RawMessage
	Code   int64
	Msg    string
	Data   string
}

func callOutcome(t *testing.T, c *client, name string, args any) outcome {
	t.Helper()
	res, err := call(t, c, name, args)
	if err != nil {
		var w *jsonrpc.Error
		if !errors.As(err, &w) {
			t.Fatalf("%s: error %v (%T), want a JSON-RPC error", name, err, err)
		}
		return outcome{Code: w.Code, Msg: w.Message, Data: string(w.Data)}
	}
	data, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	return outcome{Result: data}
}

// The fast path answers what go-sdk's session would: the same results,
// tool errors and JSON-RPC errors, call for call.
func TestFastPathAnswersAsGoSDK(t *testing.T) {
	fast := start(t, mcpserver.Options{NoAuth: true}, nil)
	slow := start(t, mcpserver.Options{NoAuth: true, NoFastPath: true}, nil)
	fast.addServer(t, "alpha", nil)
	slow.addServer(t, "alpha", nil)
	fc, sc := connect(t, fast.url, "", nil), connect(t, slow.url, "", nil)

	cases := []struct {
		name string
		args any
	}{
		{"alpha__echo", map[string]any{"message": "same answer"}},
		{"alpha__echo", map[string]any{"message": "ünïcødé \u2028 \"quoted\" <b>"}},
		{"alpha__fail", map[string]any{"message": "tool error"}},
		{"alpha__large", map[string]any{"bytes": 200000}},
		{"alpha__meta", map[string]any{}},
		{"alpha__echo", map[string]any{"message": 42}}, // schema: isError before the bus
		{"alpha__echo", nil},              // message required
		{"alpha__nope", map[string]any{}}, // unknown tool
	}
	for _, tc := range cases {
		f, s := callOutcome(t, fc, tc.name, tc.args), callOutcome(t, sc, tc.name, tc.args)
		if string(f.Result) != string(s.Result) || f.Code != s.Code || f.Msg != s.Msg || f.Data != s.Data {
			t.Errorf("%s %v:\nfast path %+v\ngo-sdk    %+v", tc.name, tc.args, f, s)
		}
		if f.Result == nil && f.Code == 0 {
			t.Errorf("%s: neither a result nor an error", tc.name)
		}
	}

	// On the wire: the fast path answers with one application/json body
	// (so it did serve), go-sdk's session on an event stream; the JSON-RPC
	// messages are the same, byte for byte once decoded.
	for i, tc := range []struct {
		params string
		fast   bool // the fast path takes it
	}{
		{`{"name":"alpha__echo","arguments":{"message":"raw"}}`, true},
		{`{"name":"alpha__fail","arguments":{"message":"raw error"}}`, true},
		{`{"name":"alpha__echo","arguments":{"message":42}}`, true},
		{`{"name":"alpha__echo"}`, true},
		{`{"name":"alpha__large","arguments":{"bytes":100000}}`, true},
		{`{"name":"alpha__nope","arguments":{}}`, false},
		{`{"Name":"alpha__echo","arguments":{"message":"case"}}`, false}, // keys are case-sensitive
	} {
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":"w-%d","method":"tools/call","params":%s}`, i, tc.params)
		f := rawWith(t, fast.url, "", fc.ID(), body, nil)
		s := rawWith(t, slow.url, "", sc.ID(), body, nil)
		if s.ctype != "text/event-stream" {
			t.Fatalf("go-sdk path answered %s %s", s.ctype, s.body)
		}
		if want := map[bool]string{true: "application/json", false: "text/event-stream"}[tc.fast]; f.ctype != want {
			t.Errorf("%s: answered as %s, want %s", tc.params, f.ctype, want)
		}
		if f.status != s.status || !sameJSON(t, f.message(t), s.message(t)) {
			t.Errorf("%s:\nfast path %d %s\ngo-sdk    %d %s", tc.params, f.status, f.message(t), s.status, s.message(t))
		}
	}
}

// sameJSON compares two JSON texts as values.
func sameJSON(t *testing.T, a, b string) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal([]byte(a), &x); err != nil {
		t.Fatalf("not JSON: %s", a)
	}
	if err := json.Unmarshal([]byte(b), &y); err != nil {
		t.Fatalf("not JSON: %s", b)
	}
	return reflect.DeepEqual(x, y)
}

// A second call with the id of one still running on the session is refused
// as go-sdk refuses it; the first one completes.
func TestFastPathDuplicateID(t *testing.T) {
	e := start(t, mcpserver.Options{NoAuth: true}, nil)
	runs := filepath.Join(t.TempDir(), "runs")
	e.addServer(t, "alpha", map[string]model.EnvVar{"TESTMCP_RUN_FILE": {Value: runs}})
	c := connect(t, e.url, "", nil)
	// The duplicate comes once the first call runs at the server, which
	// sleeps long enough that a loaded machine still has it running then.
	slow := `{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"alpha__sleep","arguments":{"ms":4000}}}`
	first := make(chan rawResp, 1)
	go func() { first <- rawWith(t, e.url, "", c.ID(), slow, nil) }()
	waitRuns(t, runs, 1)
	dup := rawWith(t, e.url, "", c.ID(), slow, nil)
	if dup.status != http.StatusBadRequest || dup.rpcCode(t) != jsonrpc.CodeInvalidRequest {
		t.Fatalf("duplicate id: %d %s", dup.status, dup.body)
	}
	if r := <-first; r.status != http.StatusOK || r.ctype != "application/json" || r.rpcCode(t) != 0 {
		t.Fatalf("the first call: %d %s %s", r.status, r.ctype, r.body)
	}
}

// Whatever the fast path is not sure of goes to go-sdk, which answers it
// (or refuses it) as it always did.
func TestFastPathLeavesTheRestToGoSDK(t *testing.T) {
	e := start(t, mcpserver.Options{NoAuth: true}, nil)
	e.addServer(t, "alpha", nil)
	c := connect(t, e.url, "", nil)
	call := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"alpha__echo","arguments":{"message":"x"}}}`

	for _, tc := range []struct {
		what   string
		sid    string
		body   string
		hdr    map[string]string
		status int
		ctype  string
	}{
		{"a progress token streams", c.ID(), `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"alpha__echo","arguments":{"message":"x"},"_meta":{"progressToken":"p"}}}`, nil, http.StatusOK, "text/event-stream"},
		{"no protocol header", c.ID(), call, map[string]string{"Mcp-Protocol-Version": ""}, http.StatusOK, "text/event-stream"},
		{"an unsupported protocol version", c.ID(), call, map[string]string{"Mcp-Protocol-Version": "2023-01-01"}, http.StatusBadRequest, ""},
		{"Accept without an event stream", c.ID(), call, map[string]string{"Accept": "application/json"}, http.StatusBadRequest, ""},
		{"a foreign Host on loopback", c.ID(), call, map[string]string{"Host": "evil.example"}, http.StatusForbidden, ""},
		{"an unknown session of this key", strings.SplitN(c.ID(), "-", 2)[0] + "-bogus", call, nil, http.StatusNotFound, ""},
		{"a resumption (Last-Event-ID)", c.ID(), call, map[string]string{"Last-Event-ID": "1"}, http.StatusBadRequest, ""},
		{"a Content-Type go-sdk cannot parse", c.ID(), call, map[string]string{"Content-Type": "application/json; charset"}, http.StatusUnsupportedMediaType, ""},
	} {
		st, ct, body := rawPost(t, e.url, tc.sid, tc.body, tc.hdr)
		if st != tc.status || (tc.ctype != "" && ct != tc.ctype) {
			t.Errorf("%s: %d %s %s, want %d %s", tc.what, st, ct, body, tc.status, tc.ctype)
		}
	}

	// A closed session is gone for the fast path too.
	sid := c.ID()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if st, _, body := rawPost(t, e.url, sid, call, nil); st != http.StatusNotFound {
		t.Fatalf("call on a closed session: %d %s", st, body)
	}
}

// Sessions idle for SessionTimeout are closed; calls on the fast path count
// as use, though go-sdk never sees them. (A session whose GET stream is
// open is not idle: TestListeningSessionIsNotIdle. This one opened its
// stream and closed it, so the whole timeout applies.)
func TestSessionIdleTimeout(t *testing.T) {
	// A timeout twenty times the pause between the calls below: a loaded
	// host stretches the gap between one call's end and the next one's
	// start (and a sixth of it, the streamless session's, must cover the
	// time from the initialize to the GET below).
	e := start(t, mcpserver.Options{NoAuth: true, SessionTimeout: 2 * time.Second}, nil)
	e.addServer(t, "alpha", nil)
	used := rawSession(t, e.url)
	_ = openUnreadStream(t, e.url, "", used).Close()
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"alpha__echo","arguments":{"message":"keepalive"}}}`
	for end := time.Now().Add(4500 * time.Millisecond); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if st, ct, body := rawPost(t, e.url, used, call, nil); st != http.StatusOK || ct != "application/json" {
			t.Fatalf("a session in use was closed: %d %s %s", st, ct, body)
		}
	}
	time.Sleep(4500 * time.Millisecond) // idle: asking sooner would be a use
	if st, _, body := rawPost(t, e.url, used, call, nil); st != http.StatusNotFound {
		t.Fatalf("an idle session still answers: %d %s", st, body)
	}
	// A session that never sent a request after its initialize is closed too.
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
	r := rawWith(t, e.url, "", "", init, map[string]string{"Mcp-Protocol-Version": ""})
	sid := r.session
	if sid == "" {
		t.Fatalf("initialize gave no session id: %d %s", r.status, r.body)
	}
	time.Sleep(1200 * time.Millisecond)
	if st, _, body := rawPost(t, e.url, sid, call, nil); st != http.StatusNotFound {
		t.Fatalf("a session idle since initialize still answers: %d %s", st, body)
	}
}

// A call its client cancels (notifications/cancelled) gets no response:
// the spec's receiver SHOULD NOT answer it, and the TypeScript SDK flags the
// answer to an id it forgot. Its POST ends with an event stream of no event.
// So on the fast path and on go-sdk's (a call with a progress token), with
// event streams and with JSON answers.
func TestFastPathCancelledCallIsNotAnswered(t *testing.T) {
	for _, jsonResponse := range []bool{false, true} {
		t.Run(fmt.Sprintf("json=%v", jsonResponse), func(t *testing.T) { testCancelledCall(t, jsonResponse) })
	}
}

func testCancelledCall(t *testing.T, jsonResponse bool) {
	e := start(t, mcpserver.Options{NoAuth: true, JSONResponse: jsonResponse}, nil)
	runs := filepath.Join(t.TempDir(), "runs")
	e.addServer(t, "alpha", map[string]model.EnvVar{"TESTMCP_RUN_FILE": {Value: runs}})
	started := 0
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
	sid := rawWith(t, e.url, "", "", init, map[string]string{"Mcp-Protocol-Version": ""}).session
	if sid == "" {
		t.Fatal("no session")
	}
	raw(t, e.url, "", sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)

	for id, meta := range map[int]string{7: ``, 17: `,"_meta":{"progressToken":"p17"}`} {
		got := make(chan rawResp, 1)
		go func() {
			got <- raw(t, e.url, "", sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"alpha__sleep","arguments":{"ms":20000}%s}}`, id, meta))
		}()
		started++
		waitRuns(t, runs, started) // the call is at the server
		begin := time.Now()
		if r := raw(t, e.url, "", sid, fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d,"reason":"user"}}`, id)); r.status != http.StatusAccepted {
			t.Fatalf("notifications/cancelled %d: %d %s", id, r.status, r.body)
		}
		select {
		case r := <-got:
			if r.status != http.StatusOK || r.ctype != "text/event-stream" || strings.Contains(r.body, `"id":`) {
				t.Fatalf("the cancelled call %d%s was answered: %d %s %q", id, meta, r.status, r.ctype, r.body)
			}
			if d := time.Since(begin); d > 10*time.Second { // of a 20 s sleep
				t.Fatalf("the cancelled call %d's POST ended %s after the cancellation", id, d)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("the cancelled call %d's POST did not end", id)
		}
	}
	// The session goes on.
	if r := raw(t, e.url, "", sid, `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"alpha__echo","arguments":{"message":"still here"}}}`); !strings.Contains(r.body, "still here") {
		t.Fatalf("a call after the cancellation: %d %s", r.status, r.body)
	}
}

// A session's client that hangs up on a call has not cancelled it: the
// spec (2025-11-25) has a server not read a disconnection as a
// cancellation (the client cancels with notifications/cancelled), and
// go-sdk's session lets the call run on. So does the fast path; a request
// of 2026-07-28, whose POST is the whole request, is cancelled
// (TestModernFastPathAnswersAsGoSDK).
func TestSessionHangUpIsNoCancellation(t *testing.T) {
	for _, noFast := range []bool{false, true} {
		e := start(t, mcpserver.Options{NoAuth: true, NoFastPath: noFast}, nil)
		dir := t.TempDir()
		runs, mark := filepath.Join(dir, "runs"), filepath.Join(dir, "cancelled")
		e.addServer(t, "alpha", map[string]model.EnvVar{"TESTMCP_RUN_FILE": {Value: runs}, "TESTMCP_CANCEL_FILE": {Value: mark}})
		sid := rawSession(t, e.url)
		cancels := count(t, e, "mcp.v1.cancel.alpha")
		ctx, hangUp := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "POST", e.url, strings.NewReader(
			`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"alpha__sleep","arguments":{"ms":1500}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		req.Header.Set("Mcp-Session-Id", sid)
		go func() {
			defer hangUp()
			for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
				if data, _ := os.ReadFile(runs); len(data) > 0 {
					return // the call runs at the server
				}
			}
		}()
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
			if ctx.Err() == nil {
				t.Fatalf("nofast=%v: the call answered before the client hung up", noFast)
			}
		}
		waitRuns(t, runs, 1)
		time.Sleep(2500 * time.Millisecond) // the 1.5 s sleep is over
		if data, _ := os.ReadFile(mark); len(data) > 0 {
			t.Errorf("nofast=%v: the server's call was cancelled when its client hung up", noFast)
		}
		if n := cancels.Settled(t); n != 0 {
			t.Errorf("nofast=%v: %d cancellations published for a client that hung up", noFast, n)
		}
	}
}
