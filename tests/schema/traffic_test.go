package schema

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/configstore"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// captured is one message seen on the bus.
type captured struct {
	Subject string
	Reply   string
	Header  nats.Header
	Data    []byte
}

// recorder keeps every message of the bus, in the order the server delivered them.
type recorder struct {
	mu   sync.Mutex
	msgs []captured
}

func (c *recorder) add(m *nats.Msg) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs = append(c.msgs, captured{Subject: m.Subject, Reply: m.Reply, Header: m.Header, Data: append([]byte(nil), m.Data...)})
}

func (c *recorder) all() []captured {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]captured(nil), c.msgs...)
}

// count returns how many messages satisfy f.
func (c *recorder) count(f func(captured) bool) int {
	n := 0
	for _, m := range c.all() {
		if f(m) {
			n++
		}
	}
	return n
}

// record subscribes a plain NATS connection to every subject.
func record(t *testing.T, env *runnertest.Env) *recorder {
	t.Helper()
	nc, err := env.NS.Connect(nats.Name("schema-recorder"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	rec := &recorder{}
	sub, err := nc.Subscribe(">", rec.add)
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return rec
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func wantCode(t *testing.T, what string, err error, code apierr.Code) {
	t.Helper()
	var e *apierr.Error
	if !errors.As(err, &e) || e.Code != code {
		t.Fatalf("%s: want %s, got %v", what, code, err)
	}
}

// TestRealMessages runs a runner with the go-sdk test server, drives real
// traffic through libs/client, records every message of the bus and checks
// each body (requests, replies, errors, progress, events, KV values) against
// its schema and the headers against the AsyncAPI header schemas.
func TestRealMessages(t *testing.T) {
	began := time.Now()
	reg := loadRegistry(t)
	env := runnertest.Start(t, runner.Options{
		ID: "schema-runner", StopGrace: 100 * time.Millisecond, StopTimeout: 2 * time.Second, StartTimeout: 10 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	rec := record(t, env)
	subj := bus.NewSubjects("")

	// A servers file as a person writes it: checked by the schema and by the
	// real parser, then stored as `mcpbus up --config` does.
	serversFile := fmt.Sprintf(`{"servers": [
  {"name": "Schema", "enabled": true,
   "package": {"type": "binary", "identifier": %q},
   "transport": {"type": "stdio"},
   "env_vars": {"GREETING": {"value": "hi"}},
   "config": {"anything": ["goes", 1]},
   "runtime": {"call_timeout": "10s", "start_timeout": 10000}},
  {"name": "Remote Off", "enabled": false,
   "source": {"type": "official", "name": "io.example/remote", "version": "1.0.0", "url": "https://registry.example/servers/remote"},
   "transport": {"type": "http", "url": "https://example.invalid/mcp", "headers": {"X-Test": "1"}},
   "auth_type": "api_key",
   "env_vars": {"API_KEY": {"secret_ref": "remote-off/api_key", "is_secret": true, "required": true}}},
  {"name": "Broken", "enabled": true,
   "package": {"type": "binary", "identifier": "/nonexistent/mcpbus-no-such-server"},
   "transport": {"type": "stdio"}}
]}`, testServer)
	reg.check(t, "servers-file", "file servers.json", []byte(serversFile))
	cfgs, err := configstore.Parse([]byte(serversFile))
	if err != nil {
		t.Fatalf("the servers file is rejected by configstore.Parse: %v", err)
	}
	for _, c := range cfgs {
		env.Put(t, c)
	}
	const srv = "schema"
	env.WaitState(t, srv, model.StateRunning, 10*time.Second)
	env.WaitState(t, "remote-off", model.StateDisabled, 5*time.Second)
	env.WaitState(t, "broken", model.StateError, 10*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cl := env.Client

	// tools.list, all and one server.
	if tools, err := cl.ListTools(ctx, ""); err != nil || len(tools) == 0 {
		t.Fatalf("tools.list: %v (%d tools)", err, len(tools))
	}
	if _, err := cl.ListTools(ctx, srv); err != nil {
		t.Fatalf("tools.list %s: %v", srv, err)
	}
	// Calls: success, progress, a tool error (isError), an unknown tool.
	if _, err := cl.Call(ctx, srv, "echo", json.RawMessage(`{"message":"hello"}`), nil); err != nil {
		t.Fatalf("echo: %v", err)
	}
	var progressMu sync.Mutex
	var progress []model.ProgressEvent
	// The pause between steps keeps the notifications ahead of the result: the
	// runner drops a notification that go-sdk hands it after CallTool returned.
	if _, err := cl.Call(ctx, srv, "progress", json.RawMessage(`{"steps":2,"ms":20}`), &client.CallOptions{
		RequestID: "schema-progress",
		OnProgress: func(ev model.ProgressEvent) {
			progressMu.Lock()
			progress = append(progress, ev)
			progressMu.Unlock()
		},
	}); err != nil {
		t.Fatalf("progress: %v", err)
	}
	if _, err := cl.Call(ctx, srv, "fail", json.RawMessage(`{"message":"boom"}`), nil); err != nil {
		t.Fatalf("fail: %v", err)
	}
	_, err = cl.Call(ctx, srv, "no_such_tool", json.RawMessage(`{}`), nil)
	wantCode(t, "unknown tool", err, apierr.NotFound)
	// rpc: a method with a result, and an unsupported one.
	var resources json.RawMessage
	if err := cl.RPC(ctx, srv, "resources/list", map[string]any{}, &resources); err != nil {
		t.Fatalf("resources/list: %v", err)
	}
	wantCode(t, "unsupported rpc method", cl.RPC(ctx, srv, invalidRPC, nil, nil), apierr.Validation)
	// runtime: status of all and of one, a disabled and an unknown server, stop and start.
	if _, err := cl.Status(ctx); err != nil {
		t.Fatalf("runtime.status: %v", err)
	}
	if st, err := cl.Runtime(ctx, "status", srv); err != nil || st.State != model.StateRunning {
		t.Fatalf("runtime.status %s: %v %+v", srv, err, st)
	}
	if st, err := cl.Runtime(ctx, "status", "remote-off"); err != nil || st.State != model.StateDisabled {
		t.Fatalf("runtime.status remote-off: %v %+v", err, st)
	}
	_, err = cl.Runtime(ctx, "start", "ghost")
	wantCode(t, "runtime.start of an unknown server", err, apierr.NotFound)
	if st, err := cl.Runtime(ctx, "stop", srv); err != nil || st.State != model.StateStopped {
		t.Fatalf("runtime.stop: %v %+v", err, st)
	}
	if st, err := cl.Runtime(ctx, "start", srv); err != nil || st.State != model.StateRunning {
		t.Fatalf("runtime.start: %v %+v", err, st)
	}
	// A call the caller gives up on: the client publishes a cancellation.
	const cancelID = "schema-cancel"
	cctx, ccancel := context.WithCancel(ctx)
	time.AfterFunc(300*time.Millisecond, ccancel)
	if _, err := cl.Call(cctx, srv, "sleep", json.RawMessage(`{"ms":10000}`), &client.CallOptions{RequestID: cancelID}); err == nil {
		t.Fatal("the cancelled call succeeded")
	}
	ccancel()

	// Wait for the trailing messages: the call events (published after each
	// reply) and the reply of the cancelled call, then a marker published on
	// the runner's own connection after them.
	const calls = 5 // echo, progress, fail, no_such_tool, sleep
	callEvents := func(m captured) bool { return strings.HasPrefix(m.Subject, subj.Prefix+".events.call.") }
	waitFor(t, "the call events", 5*time.Second, func() bool { return rec.count(callEvents) >= calls })
	marker := "schematest.done." + strconv.FormatInt(time.Now().UnixNano(), 36)
	if err := env.NC.Publish(marker, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the marker", 5*time.Second, func() bool {
		return rec.count(func(m captured) bool { return m.Subject == marker }) == 1
	})

	checkBus(t, reg, rec.all(), subj)
	progressMu.Lock()
	if len(progress) != 2 {
		t.Errorf("the client got %d progress events, want 2: %+v", len(progress), progress)
	}
	progressMu.Unlock()
	checkStream(t, reg, env, subj)
	checkKV(t, reg, env)
	checkCallOutcomes(t, rec.all(), subj, cancelID)

	// Every schema was exercised by a real message.
	var summary []string
	for _, name := range reg.files {
		if len(reg.seen[name]) == 0 {
			t.Errorf("schemas/%s.json was not exercised by any real message", name)
		}
		summary = append(summary, fmt.Sprintf("%s %v", name, reg.seen[name]))
	}
	for name := range reg.asyncSchemas {
		if name == "RpcResult" {
			continue // a payload schema, checked with the rpc replies
		}
		if len(reg.seen["asyncapi:"+name]) == 0 {
			t.Errorf("asyncapi.yaml components/schemas/%s was not exercised by any real message", name)
		}
	}
	checkClosed(t, reg)
	sort.Strings(summary)
	t.Logf("validated in %s:\n  %s", time.Since(began).Round(time.Millisecond), strings.Join(summary, "\n  "))
}

// invalidRPC is a method the test sends on purpose: rpc-request.json must
// reject the request and the runner must answer it with an error.
const invalidRPC = "tools/call"

// request is a recorded request of the bus protocol.
type request struct {
	captured
	kind    string // tools.list, call, rpc, cancel, control, runtime.<verb>
	invalid bool   // sent on purpose against the schema
}

// kindOf names the request subjects of the bus; "" for other subjects.
func kindOf(subject string, s bus.Subjects) string {
	rest, ok := strings.CutPrefix(subject, s.Prefix+".")
	if !ok {
		return ""
	}
	tok := strings.Split(rest, ".")
	switch {
	case rest == "tools.list":
		return "tools.list"
	case tok[0] == "call" && len(tok) == 3:
		return "call"
	case tok[0] == "rpc" && len(tok) == 2:
		return "rpc"
	case tok[0] == "cancel" && len(tok) == 2:
		return "cancel"
	case tok[0] == "control" && len(tok) == 2:
		return "control"
	case tok[0] == "runtime" && len(tok) == 2:
		switch tok[1] {
		case "start", "stop", "restart", "status":
			return "runtime." + tok[1]
		}
	}
	return ""
}

// requestSchema is the body schema of each request kind.
var requestSchema = map[string]string{
	"tools.list": "tools-list-request", "call": "call-arguments", "rpc": "rpc-request", "cancel": "cancel-request",
	"control": "control-request", "runtime.start": "runtime-request", "runtime.stop": "runtime-request",
	"runtime.restart": "runtime-request", "runtime.status": "runtime-request",
}

// checkBus validates every recorded message of the bus protocol: requests by
// subject, replies by the request they answer, progress by the subject named
// in the call, events by subject, and KV writes by bucket.
func checkBus(t *testing.T, reg *registry, msgs []captured, s bus.Subjects) {
	t.Helper()
	byReply := map[string]*request{}
	progressSubjects := map[string]string{} // subject → request id
	replies := map[string]int{}
	for _, m := range msgs {
		kind := kindOf(m.Subject, s)
		if kind == "" {
			continue
		}
		src := "bus " + m.Subject
		if reg.channelFor(m.Subject) == "" {
			t.Errorf("%s: no channel of asyncapi.yaml has this subject", src)
		}
		invalid := kind == "rpc" && string(m.Data) == `{"method":"`+invalidRPC+`"}`
		if invalid {
			if reg.validate(requestSchema[kind], m.Data) == nil {
				t.Errorf("%s: %s accepts the unsupported request %s", src, requestSchema[kind], m.Data)
			}
		} else {
			reg.check(t, requestSchema[kind], src, m.Data)
		}
		if kind == "cancel" {
			if m.Reply != "" {
				t.Errorf("%s: the client's cancellation has a reply subject", src)
			}
			continue
		}
		// Requests sent through libs/bus carry a request id and the caller's remaining time.
		if m.Header.Get(bus.HeaderRequestID) == "" || m.Header.Get(bus.HeaderTimeout) == "" {
			t.Errorf("%s: request without %s or %s: %v", src, bus.HeaderRequestID, bus.HeaderTimeout, m.Header)
		}
		hs := "RequestHeaders"
		if kind == "call" {
			hs = "CallHeaders"
			if p := m.Header.Get(bus.HeaderProgressSubject); p != "" {
				progressSubjects[p] = m.Header.Get(bus.HeaderRequestID)
			}
		}
		reg.checkHeaders(t, hs, src, m.Header)
		if m.Reply == "" {
			t.Errorf("%s: request without a reply subject", src)
			continue
		}
		byReply[m.Reply] = &request{captured: m, kind: kind, invalid: invalid}
	}

	for _, m := range msgs {
		if strings.HasPrefix(m.Reply, "$JS.ACK.") {
			continue // a JetStream consumer's delivery of a stored message, validated where it was written
		}
		if req, ok := byReply[m.Subject]; ok {
			replies[m.Subject]++
			checkReply(t, reg, req, m)
			continue
		}
		if id, ok := progressSubjects[m.Subject]; ok {
			src := "bus progress of " + id
			if reg.check(t, "progress-event", src, m.Data) {
				var ev model.ProgressEvent
				_ = json.Unmarshal(m.Data, &ev)
				if ev.RequestID != id {
					t.Errorf("%s: request_id %q", src, ev.RequestID)
				}
			}
			continue
		}
		rest, ok := strings.CutPrefix(m.Subject, s.Prefix+".events.")
		if ok {
			src := "bus " + m.Subject
			if reg.channelFor(m.Subject) == "" {
				t.Errorf("%s: no channel of asyncapi.yaml has this subject", src)
			}
			switch kind, _, _ := strings.Cut(rest, "."); kind {
			case "status":
				reg.check(t, "status", src, m.Data)
			case "call":
				reg.check(t, "call-event", src, m.Data)
			default:
				t.Errorf("%s: an event kind without a schema", src)
			}
			continue
		}
		if strings.HasPrefix(m.Subject, s.Prefix+".") && kindOf(m.Subject, s) == "" {
			t.Errorf("bus %s: a subject of the protocol without a schema", m.Subject)
		}
		checkKVWrite(t, reg, m)
	}
	for reply, req := range byReply {
		if replies[reply] != 1 {
			t.Errorf("%s (%s): %d replies recorded, want 1", req.Subject, req.Data, replies[reply])
		}
	}
	if len(progressSubjects) == 0 {
		t.Error("no call asked for progress")
	}
}

// checkReply validates the reply m to req: an error reply by its headers and
// error.json, a success by the reply schema of the request kind.
func checkReply(t *testing.T, reg *registry, req *request, m captured) {
	t.Helper()
	src := fmt.Sprintf("bus reply of %s %s", req.Subject, clip(req.Data))
	if status := m.Header.Get(bus.HeaderErrorCode); status != "" {
		reg.checkHeaders(t, "ErrorHeaders", src, m.Header)
		if !reg.check(t, "error", src, m.Data) {
			return
		}
		var e apierr.Error
		_ = json.Unmarshal(m.Data, &e)
		if want := strconv.Itoa(e.Code.HTTPStatus()); status != want {
			t.Errorf("%s: %s is %s, want %s for %s", src, bus.HeaderErrorCode, status, want, e.Code)
		}
		if got := m.Header.Get(bus.HeaderError); got != e.Message {
			t.Errorf("%s: %s is %q, body message %q", src, bus.HeaderError, got, e.Message)
		}
		return
	}
	if m.Header.Get(bus.HeaderError) != "" {
		t.Errorf("%s: %s without %s", src, bus.HeaderError, bus.HeaderErrorCode)
	}
	if req.invalid {
		t.Errorf("%s: an invalid request got a success reply: %s", src, clip(m.Data))
		return
	}
	switch req.kind {
	case "tools.list":
		if reg.check(t, "tools-list-reply", src, m.Data) {
			var out struct {
				Tools []json.RawMessage `json:"tools"`
			}
			_ = json.Unmarshal(m.Data, &out)
			for _, tool := range out.Tools {
				reg.check(t, "tool", src, tool)
			}
		}
	case "call":
		reg.check(t, "call-result", src, m.Data)
	case "rpc":
		v, err := decode(m.Data)
		if err == nil {
			err = reg.asyncSchemas["RpcResult"].Validate(v)
		}
		if err != nil {
			t.Errorf("%s: does not match RpcResult: %v\nbody: %s", src, err, clip(m.Data))
		}
	case "control", "runtime.start", "runtime.stop", "runtime.restart":
		reg.check(t, "status", src, m.Data)
	case "runtime.status":
		var in model.RuntimeRequest
		_ = json.Unmarshal(req.Data, &in)
		if in.Server == "" {
			reg.check(t, "runtime-status-reply", src, m.Data)
		} else {
			reg.check(t, "status", src, m.Data)
		}
	default:
		t.Errorf("%s: unexpected reply", src)
	}
}

// kvSchema is the value schema of each bucket.
var kvSchema = map[string]string{bus.BucketConfigs: "mcp-config", bus.BucketStatus: "status", bus.BucketTools: "catalog"}

// checkKVWrite validates a write into a shared KV bucket ($KV.<bucket>.<key>).
func checkKVWrite(t *testing.T, reg *registry, m captured) {
	t.Helper()
	rest, ok := strings.CutPrefix(m.Subject, "$KV.")
	if !ok {
		return
	}
	bucket, _, _ := strings.Cut(rest, ".")
	name, ok := kvSchema[bucket]
	if !ok {
		return
	}
	src := "bus " + m.Subject
	if reg.channelFor(m.Subject) == "" {
		t.Errorf("%s: no channel of asyncapi.yaml has this subject", src)
	}
	if op := m.Header.Get("KV-Operation"); op != "" {
		if len(m.Data) != 0 {
			t.Errorf("%s: %s with a body", src, op)
		}
		return
	}
	reg.check(t, name, src, m.Data)
}

// checkStream validates every event stored in MCP_EVENTS.
func checkStream(t *testing.T, reg *registry, env *runnertest.Env, s bus.Subjects) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := env.Assets.Events.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := env.Assets.Events.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatalf("reading event %d: %v", seq, err)
		}
		n++
		src := fmt.Sprintf("stream %s #%d", m.Subject, seq)
		switch {
		case strings.HasPrefix(m.Subject, s.Prefix+".events.status."):
			reg.check(t, "status", src, m.Data)
		case strings.HasPrefix(m.Subject, s.Prefix+".events.call."):
			reg.check(t, "call-event", src, m.Data)
		default:
			t.Errorf("%s: an event without a schema", src)
		}
	}
	if n == 0 {
		t.Error("the stream MCP_EVENTS holds no events")
	}
}

// checkKV validates the current values (and the config history) of the shared buckets.
func checkKV(t *testing.T, reg *registry, env *runnertest.Env) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	buckets := []struct {
		kv      jetstream.KeyValue
		name    string
		history bool
	}{
		{env.Assets.Configs, bus.BucketConfigs, true},
		{env.Assets.Status, bus.BucketStatus, false},
		{env.Assets.Tools, bus.BucketTools, false},
	}
	for _, b := range buckets {
		lister, err := b.kv.ListKeys(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for k := range lister.Keys() {
			keys = append(keys, k)
		}
		if len(keys) == 0 {
			t.Errorf("bucket %s is empty", b.name)
		}
		for _, key := range keys {
			var entries []jetstream.KeyValueEntry
			if b.history {
				if entries, err = b.kv.History(ctx, key); err != nil {
					t.Fatal(err)
				}
			} else {
				e, err := b.kv.Get(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				entries = append(entries, e)
			}
			for _, e := range entries {
				if e.Operation() != jetstream.KeyValuePut {
					continue
				}
				reg.check(t, kvSchema[b.name], fmt.Sprintf("kv %s/%s@%d", b.name, key, e.Revision()), e.Value())
			}
		}
	}
}

// checkCallOutcomes checks that the recorded call events tell the calls apart
// and that every status of the lifecycle was seen.
func checkCallOutcomes(t *testing.T, msgs []captured, s bus.Subjects, cancelID string) {
	t.Helper()
	outcomes := map[string]model.CallEvent{}
	states := map[string]bool{}
	for _, m := range msgs {
		switch {
		case strings.HasPrefix(m.Subject, s.Prefix+".events.call."):
			var ev model.CallEvent
			if err := json.Unmarshal(m.Data, &ev); err != nil {
				t.Fatal(err)
			}
			outcomes[ev.Tool] = ev
		case strings.HasPrefix(m.Subject, s.Prefix+".events.status."):
			var st model.Status
			if err := json.Unmarshal(m.Data, &st); err != nil {
				t.Fatal(err)
			}
			states[st.State] = true
		}
	}
	for tool, want := range map[string]string{"echo": "ok", "progress": "ok", "fail": "tool_error", "no_such_tool": "error"} {
		if got := outcomes[tool].Outcome; got != want {
			t.Errorf("call event of %s: outcome %q, want %q", tool, got, want)
		}
	}
	sleep := outcomes["sleep"]
	if sleep.RequestID != cancelID || (sleep.Outcome != "timeout" && sleep.Outcome != "cancelled") {
		t.Errorf("call event of the cancelled call: %+v", sleep)
	}
	t.Logf("the cancelled call was recorded with outcome %q, code %q", sleep.Outcome, sleep.Code)
	for _, st := range []string{model.StateStarting, model.StateRunning, model.StateStopped, model.StateError, model.StateDisabled} {
		if !states[st] {
			t.Errorf("no status event with state %s", st)
		}
	}
}

// checkClosed adds an unknown member to a real message of each schema: the
// schemas of mcpbus's own messages must reject it (so a field added to a Go
// type without its schema fails this test), while the MCP result and the tool
// arguments stay open.
func checkClosed(t *testing.T, reg *registry) {
	t.Helper()
	open := map[string]bool{"call-arguments": true, "call-result": true}
	for _, name := range reg.files {
		var obj map[string]any
		if err := json.Unmarshal(reg.firstReal[name], &obj); err != nil || obj == nil {
			continue
		}
		obj["x_unknown_member"] = true
		err := reg.validate(name, mustJSON(t, obj))
		switch {
		case open[name] && err != nil:
			t.Errorf("%s.json rejects an unknown member: %v", name, err)
		case !open[name] && err == nil:
			t.Errorf("%s.json accepts an unknown member", name)
		}
	}
}
