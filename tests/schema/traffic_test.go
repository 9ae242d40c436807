package schema

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"sigs.k8s.io/yaml"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/approvals"
	"github.com/mcpbus/mcpbus/libs/audit"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/config/config"
	"github.com/mcpbus/mcpbus/services/credential/credential"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
	"github.com/mcpbus/mcpbus/services/gateway/auth/jwtauth"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	regsvc "github.com/mcpbus/mcpbus/services/registry/registry"
	"github.com/mcpbus/mcpbus/services/registry/registrytest"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/tools/mcpbus/stack"
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
	nc   *nats.Conn // the superuser connection that records
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
func record(t *testing.T, ns *embednats.Server, superuser nats.Option) *recorder {
	t.Helper()
	nc, err := ns.Connect(nats.Name("schema-recorder"), superuser)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	rec := &recorder{nc: nc}
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

// startSystem runs the whole of mcpbus as `mcpbus up` assembles it (config,
// credential, registry and runner services on an embedded NATS) in front of
// fake registries serving the recorded fixtures of services/registry.
func startSystem(t *testing.T) (*stack.Stack, nats.Option) {
	t.Helper()
	const fixtures = "../../services/registry/testdata/"
	var official []json.RawMessage
	for _, f := range []string{"official-sample.json", "official-more.json"} {
		entries, err := registrytest.LoadOfficial(fixtures + f)
		if err != nil {
			t.Fatal(err)
		}
		official = append(official, entries...)
	}
	off, err := registrytest.NewOfficial(official)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(off.Close)
	smithery, err := registrytest.LoadSmithery(fixtures + "smithery-sample.json")
	if err != nil {
		t.Fatal(err)
	}
	more, err := registrytest.LoadSmithery(fixtures + "smithery-more.json")
	if err != nil {
		t.Fatal(err)
	}
	smithery.Merge(more)
	smi, err := registrytest.NewSmithery(smithery, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(smi.Close)

	logs := &testkit.LogBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	superUser, superOpt := testkit.Superuser(t)
	st, err := stack.Start(ctx, stack.Options{
		DataDir: t.TempDir(), InProcessOnly: true, ExtraUsers: []*server.NkeyUser{superUser},
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Runner: runner.Options{ID: "schema-runner", StopGrace: 100 * time.Millisecond, StopTimeout: 2 * time.Second, StartTimeout: 10 * time.Second},
		// A failed enable answers within this instead of the 90 s default.
		Config: config.Options{StartTimeout: 15 * time.Second},
		// Plans must not depend on whether this host has npx or docker.
		Registry: regsvc.Options{OfficialURL: off.URL, SmitheryURL: smi.URL, HasCommand: func(string) bool { return true }},
		// The gateway serves oauth.start and the authorization callback.
		Gateway: &gateway.Options{Addr: "127.0.0.1:0"},
	})
	if err != nil {
		t.Fatalf("starting the stack: %v", err)
	}
	t.Cleanup(func() {
		st.Close()
		if t.Failed() {
			t.Logf("service log (tail):\n%s", logs.Tail(8000))
		}
	})
	return st, superOpt
}

// waitState polls runtime.status until server is in state.
func waitState(t *testing.T, cl *client.Client, server, state string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	var st model.Status
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var err error
		st, err = cl.Runtime(ctx, "status", server)
		cancel()
		if err == nil && st.State == state {
			return
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("server %s: state %q (%s %s), want %q after %s", server, st.State, st.Code, st.Message, state, within)
}

// TestRealMessages runs the whole system (tools/mcpbus/stack) with the go-sdk
// test server, fake registries and a scripted local model, drives real
// traffic through every service (runner, config, credential, registry, chat,
// the gateway's approvals, token revocations and API keys; mcpbus up's
// agent identities; tool pin review)
// with their Go clients, records every message of the bus and checks each
// body (requests, replies, errors, progress, events, stream contents, KV
// values) against its schema, the headers against the
// AsyncAPI header schemas, and that no secret value leaves the messages
// allowed to carry it.
func TestRealMessages(t *testing.T) {
	began := time.Now()
	reg := loadRegistry(t)
	sys, superOpt := startSystem(t)
	rec := record(t, sys.NATS, superOpt)
	subj := bus.NewSubjects("")
	sec := newSecrets()
	bad := deliberate{}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := sys.Client

	// A servers file as a person writes it: checked by the schema, then
	// imported through the config service as `mcpbus up --config` does. Its
	// secrets come in as ${VAR} references and go to the credential service.
	serversFile := fmt.Sprintf(`{"servers": [
  {"name": "Schema", "enabled": true,
   "package": {"type": "binary", "identifier": %q},
   "transport": {"type": "stdio"},
   "env_vars": {"GREETING": {"value": "hi"}, "SCHEMA_TOKEN": {"value": "${SCHEMA_TOKEN}", "is_secret": true, "required": true}},
   "config": {"anything": ["goes", 1]},
   "runtime": {"call_timeout": "10s", "start_timeout": 10000}},
  {"name": "Remote Off", "enabled": false,
   "source": {"type": "official", "name": "io.example/remote", "version": "1.0.0", "url": "https://registry.example/servers/remote"},
   "transport": {"type": "http", "url": "https://example.invalid/mcp", "headers": {"X-Test": "1", "Authorization": "Bearer ${REMOTE_TOKEN}"}},
   "auth_type": "api_key"},
  {"name": "Broken", "enabled": true,
   "package": {"type": "binary", "identifier": "/nonexistent/mcpbus-no-such-server"},
   "transport": {"type": "stdio"}}
]}`, testServer)
	reg.check(t, "servers-file", "file servers.json", []byte(serversFile))
	path := filepath.Join(t.TempDir(), "servers.json")
	if err := os.WriteFile(path, []byte(serversFile), 0o600); err != nil {
		t.Fatal(err)
	}
	imported, err := sys.LoadServers(ctx, path, map[string]string{"SCHEMA_TOKEN": sec.value("schema-token"), "REMOTE_TOKEN": sec.value("remote-token")})
	if err != nil || len(imported.Created) != 3 {
		t.Fatalf("importing the servers file: %v (%d created)", err, len(imported.Created))
	}
	const srv = "schema"
	waitState(t, cl, srv, model.StateRunning, 15*time.Second)
	waitState(t, cl, "remote-off", model.StateDisabled, 5*time.Second)
	waitState(t, cl, "broken", model.StateError, 10*time.Second)

	// tools.list, all and one server.
	if tools, err := cl.ListTools(ctx, ""); err != nil || len(tools) == 0 {
		t.Fatalf("tools.list: %v (%d tools)", err, len(tools))
	}
	if _, err := cl.ListTools(ctx, srv); err != nil {
		t.Fatalf("tools.list %s: %v", srv, err)
	}
	if found, err := cl.SearchTools(ctx, "echo a message", 3); err != nil || len(found.Tools) == 0 {
		t.Fatalf("tools.search: %v (%v)", err, found)
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
	// A server's request of its client during the call (elicitation), answered.
	if _, err := cl.Call(ctx, srv, "ask", json.RawMessage(`{"message":"Your name?"}`), &client.CallOptions{
		OnClientRequest: func(context.Context, model.ClientRequest) (any, error) {
			return map[string]any{"action": "accept", "content": map[string]any{"name": "schema"}}, nil
		},
	}); err != nil {
		t.Fatalf("ask: %v", err)
	}
	if _, err := cl.Call(ctx, srv, "fail", json.RawMessage(`{"message":"boom"}`), nil); err != nil {
		t.Fatalf("fail: %v", err)
	}
	_, err = cl.Call(ctx, srv, "no_such_tool", json.RawMessage(`{}`), nil)
	wantCode(t, "unknown tool", err, apierr.NotFound)
	// Tasks: one run to its result, one reporting progress, one cancelled, one refused.
	task, err := cl.CreateTask(ctx, srv, "echo", json.RawMessage(`{"message":"as a task"}`))
	if err != nil {
		t.Fatalf("task.create: %v", err)
	}
	if done, err := cl.TaskResult(ctx, task.ID, 20*time.Second); err != nil || done.State != model.TaskCompleted {
		t.Fatalf("task.result: %+v, %v", done, err)
	}
	if _, err := cl.Task(ctx, task.ID); err != nil {
		t.Fatalf("task.get: %v", err)
	}
	// One that reports progress: its working events carry it.
	prog, err := cl.CreateTask(ctx, srv, "progress", json.RawMessage(`{"steps":3,"ms":400}`))
	if err != nil {
		t.Fatalf("task.create: %v", err)
	}
	if done, err := cl.TaskResult(ctx, prog.ID, 20*time.Second); err != nil || done.State != model.TaskCompleted || done.Progress == nil {
		t.Fatalf("task.result of the progress task: %+v, %v", done, err)
	}
	if list, err := cl.Tasks(ctx, "", false); err != nil || len(list) == 0 {
		t.Fatalf("task.list: %v, %v", list, err)
	}
	long, err := cl.CreateTask(ctx, srv, "sleep", json.RawMessage(`{"ms":60000}`))
	if err != nil {
		t.Fatalf("task.create: %v", err)
	}
	if _, err := cl.CancelTask(ctx, long.ID); err != nil {
		t.Fatalf("task.cancel: %v", err)
	}
	_, err = cl.CancelTask(ctx, task.ID)
	wantCode(t, "cancel of a completed task", err, apierr.Conflict)
	// rpc: a method with a result, and an unsupported one.
	var resources json.RawMessage
	if err := cl.RPC(ctx, srv, "resources/list", map[string]any{}, &resources); err != nil {
		t.Fatalf("resources/list: %v", err)
	}
	// A resource subscription, which makes the server's update an event,
	// and the server's own prompt list change.
	// The server sends its list change 10 ms after the change: waited for,
	// as the server is stopped below.
	notices, err := rec.nc.SubscribeSync(subj.EventsOf("list_changed"))
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.RPC(ctx, srv, "resources/subscribe", map[string]any{"uri": "test://greeting"}, nil); err != nil {
		t.Fatalf("resources/subscribe: %v", err)
	}
	for tool, arg := range map[string]string{"touch_resource": "test://greeting", "add_prompt": "schema-prompt"} {
		if _, err := cl.Call(ctx, srv, tool, json.RawMessage(`{"message":"`+arg+`"}`), nil); err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
	}
	if _, err := notices.NextMsg(10 * time.Second); err != nil {
		t.Fatalf("no list_changed event after the server added a prompt: %v", err)
	}
	_ = notices.Unsubscribe()
	bad.add("rpc", model.RPCRequest{Method: invalidRPC})
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
	// runtime.forget: a principal's per-principal session closed (as after
	// their own credentials changed), and one without the principal refused.
	if err := cl.ApplyPrincipalSecrets(ctx, srv, "key:0123456789abcdef"); err != nil {
		t.Fatalf("runtime.forget: %v", err)
	}
	wantCode(t, "runtime.forget without a principal",
		bus.RequestJSON(ctx, sys.Conn, subj.Runtime("forget"), model.RuntimeRequest{Server: srv}, &model.Status{}, 10*time.Second), apierr.Validation)
	// A call the caller gives up on: the client publishes a cancellation.
	const cancelID = "schema-cancel"
	cctx, ccancel := context.WithCancel(ctx)
	time.AfterFunc(300*time.Millisecond, ccancel)
	if _, err := cl.Call(cctx, srv, "sleep", json.RawMessage(`{"ms":10000}`), &client.CallOptions{RequestID: cancelID}); err == nil {
		t.Fatal("the cancelled call succeeded")
	}
	ccancel()

	// The control plane: every verb of the config, credential and registry services.
	driveControlPlane(t, ctx, sys, sec, bad)
	// The chat service: every verb, turns with a tool call and its approval, a cancellation.
	driveChat(t, ctx, sys, sec, bad)
	driveOAuth(t, ctx, sys, sec)
	driveRetry(t, ctx, sys, srv)
	driveApprovals(t, ctx, sys, srv)
	driveReview(t, ctx, sys, rec, subj, srv)
	driveTokens(t, ctx, sys, subj, bad)
	apiKey := driveKeys(t, ctx, sys, subj, bad)
	agentSeed := driveAgents(t, ctx, sys, subj, bad)
	if _, err := sys.Conn.Request("$SRV.PING."+agentsService, nil, 5*time.Second); err != nil { // the operator may discover services
		t.Errorf("no micro service %s answers: %v", agentsService, err)
	}
	feedPlain := driveFingerprints(t, ctx, sys, sec, bad)

	// Wait for the trailing messages: the call events (published after each
	// reply), the reply of the cancelled call and of whatever the runner asked
	// on its own (credentials of a server it starts), then a marker published
	// after them.
	const calls = 6 // echo, progress, fail, no_such_tool, sleep, and the chat turn's echo
	callEvents := func(m captured) bool { return strings.HasPrefix(m.Subject, subj.Prefix+".events.call.") }
	waitFor(t, "the call events", 5*time.Second, func() bool { return rec.count(callEvents) >= calls })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		left := unanswered(rec.all(), subj)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("requests without a reply after 10s: %s", strings.Join(left, ", "))
		}
	}
	marker := "schematest.done." + strconv.FormatInt(time.Now().UnixNano(), 36)
	if err := rec.nc.Publish(marker, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the marker", 5*time.Second, func() bool {
		return rec.count(func(m captured) bool { return m.Subject == marker }) == 1
	})

	msgs := rec.all()
	tally := checkBus(t, reg, msgs, subj, bad)
	checkVerbs(t, tally)
	checkKeyOnce(t, reg, msgs, apiKey)
	checkSeedNever(t, msgs, agentSeed)
	credSvc := sys.Services["credential"].(*credential.Service)
	checkSecrets(t, reg, msgs, subj, sec, func(sealed []byte, sender string) (model.Credentials, error) {
		return credSvc.Unseal(context.Background(), sealed, sender)
	})
	reg.check(t, "cred-fingerprints", "bus cred.fingerprints (opened)", feedPlain)
	progressMu.Lock()
	if len(progress) != 2 {
		t.Errorf("the client got %d progress events, want 2: %+v", len(progress), progress)
	}
	progressMu.Unlock()
	js, err := jetstream.New(rec.nc) // the superuser: every stream and bucket
	if err != nil {
		t.Fatal(err)
	}
	checkStream(t, reg, js, subj)
	checkChatLog(t, reg, js, subj)
	checkKV(t, reg, js)
	checkAuditExport(t, reg, js)
	checkCallOutcomes(t, msgs, subj, cancelID)

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
	t.Logf("validated %d messages in %s:\n  %s", len(msgs), time.Since(began).Round(time.Millisecond), strings.Join(summary, "\n  "))
}

// invalidRPC is a method the test sends on purpose: rpc-request.json must
// reject the request and the runner must answer it with an error.
const invalidRPC = "tools/call"

// deliberate holds the requests the test sends against their schema on
// purpose (kind + body): the schema must reject them and the service must
// answer with an error.
type deliberate map[string]bool

func (d deliberate) add(kind string, body any) {
	b, err := json.Marshal(body) // what libs/bus sends
	if err != nil {
		panic(err)
	}
	d[kind+" "+string(b)] = true
}

func (d deliberate) has(kind string, body []byte) bool { return d[kind+" "+string(body)] }

// request is a recorded request of the bus protocol.
type request struct {
	captured
	kind    string // tools.list, call, rpc, cancel, control, runtime.<verb>, config.<verb>, cred.<verb>, registry.<verb>
	invalid bool   // sent on purpose against the schema
}

// controlVerbs are the verbs of the control-plane services, by service.
func controlVerbs() map[string][]string {
	return map[string][]string{
		"config":    config.Verbs,
		"cred":      credential.Verbs,
		"registry":  {"search", "get"},
		"chat":      chatVerbs,
		"oauth":     {"start"},
		"task":      {"create", "get", "result", "cancel", "list"},
		"approvals": {approvals.VerbList, approvals.VerbDecide, approvals.VerbRulesGet, approvals.VerbRulesPut},
		"tokens":    {"revoke"},
		"keys":      {"create", "list", "revoke"},
		"agents":    {"create", "list", "revoke"},
	}
}

// chatVerbs are the chat service's verbs (subjects <prefix>.chat.<verb>).
var chatVerbs = []string{"send", "history", "list", "delete", "cancel", "approve", "answer", "pending", "watch",
	"profiles.put", "profiles.get", "profiles.list", "profiles.delete"}

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
	case rest == "tools.search":
		return "tools.search"
	case rest == "tools.review":
		return "tools.review"
	case rest == "tools.approve":
		return "tools.approve"
	case tok[0] == "call" && len(tok) == 3:
		return "call"
	case tok[0] == "rpc" && len(tok) == 2:
		return "rpc"
	case tok[0] == "cancel" && len(tok) == 2:
		return "cancel"
	case tok[0] == "control" && (len(tok) == 2 || len(tok) == 3 && tok[2] == "all"):
		return "control"
	case tok[0] == "gateway" && len(tok) == 3 && tok[1] == "retry":
		return "gateway.retry"
	case tok[0] == "oauth" && len(tok) == 3 && tok[1] == "callback":
		return "oauth.callback"
	case tok[0] == "runtime" && len(tok) == 2:
		switch tok[1] {
		case "start", "stop", "restart", "status", "forget":
			return "runtime." + tok[1]
		}
	default:
		for _, verb := range controlVerbs()[tok[0]] {
			if rest == tok[0]+"."+verb {
				return rest
			}
		}
	}
	return ""
}

// requestSchema is the body schema of each request kind.
var requestSchema = map[string]string{
	"tools.list": "tools-list-request", "tools.search": "tools-search-request", "tools.review": "tools-review-request", "tools.approve": "tools-approve-request", "call": "call-arguments", "rpc": "rpc-request", "cancel": "cancel-request",
	"control": "control-request", "runtime.start": "runtime-request", "runtime.stop": "runtime-request",
	"runtime.restart": "runtime-request", "runtime.status": "runtime-request", "runtime.forget": "runtime-request",

	"config.create": "config-create-request", "config.get": "config-ref", "config.list": "config-list-request",
	"config.update": "config-update-request", "config.delete": "config-ref", "config.enable": "config-ref",
	"config.disable": "config-ref", "config.import": "config-import-request", "config.export": "config-export-request",
	"config.history": "config-ref", "config.rollback": "config-rollback-request",

	"cred.set": "cred-set-request", "cred.delete": "cred-delete-request", "cred.describe": "cred-describe-request",
	"cred.chatset": "cred-set-request", "cred.chatdelete": "cred-delete-request", "cred.chatdescribe": "cred-describe-request",
	"cred.resolve": "cred-resolve-request", "cred.key": "cred-key-request", "cred.registry": "cred-resolve-request",
	"cred.chatkey": "cred-chatkey-request", "cred.oauthclient": "cred-oauthclient-request", "cred.fingerprints": "cred-fingerprints-request",
	"cred.forget": "cred-forget-request",

	"registry.search": "registry-search-request", "registry.get": "registry-get-request",

	"chat.send": "chat-send-request", "chat.history": "chat-conversation-ref", "chat.list": "chat-list-request",
	"chat.delete": "chat-conversation-ref", "chat.cancel": "chat-cancel-request", "chat.approve": "chat-approve-request",
	"chat.answer": "chat-answer-request", "chat.pending": "chat-conversation-ref", "chat.watch": "chat-conversation-ref", "chat.profiles.put": "chat-profile-put-request",
	"chat.profiles.get": "chat-profile-ref", "chat.profiles.list": "chat-profile-list-request", "chat.profiles.delete": "chat-profile-ref",

	"oauth.start": "oauth-start-request", "oauth.callback": "oauth-callback-request", "gateway.retry": "gateway-retry-request",

	"task.create": "task-create-request", "task.get": "task-request", "task.result": "task-request", "task.cancel": "task-request",
	"task.list": "task-list-request",

	"approvals.list": "approvals-list-request", "approvals.decide": "approval-decide-request",
	"approvals.rules-get": "approval-rules-get-request", "approvals.rules-put": "approval-rules",

	"tokens.revoke": "token-revoke-request",

	"keys.create": "key-create-request", "keys.list": "key-list-request", "keys.revoke": "key-revoke-request",

	"agents.create": "agent-create-request", "agents.list": "agent-list-request", "agents.revoke": "agent-ref",
}

// replySchema is the schema of the success reply of the request kinds that
// have exactly one.
var replySchema = map[string]string{
	"tools.review": "tools-review-reply", "tools.approve": "tool-pin", "call": "call-result", "control": "status", "runtime.start": "status", "runtime.stop": "status", "runtime.restart": "status", "runtime.forget": "status",

	"config.create": "mcp-config", "config.get": "mcp-config", "config.update": "mcp-config", "config.enable": "mcp-config",
	"config.disable": "mcp-config", "config.rollback": "mcp-config", "config.list": "config-list-reply",
	"config.delete": "config-delete-reply", "config.import": "config-import-reply", "config.export": "config-export-reply",
	"config.history": "config-history-reply",

	"cred.set": "cred-description", "cred.delete": "cred-description", "cred.describe": "cred-description",
	"cred.chatset": "cred-description", "cred.chatdelete": "cred-description", "cred.chatdescribe": "cred-description",
	"cred.resolve": "sealed-reply", "cred.key": "cred-key-reply", "cred.registry": "sealed-reply",
	"cred.chatkey": "cred-chatkey-reply", "cred.oauthclient": "sealed-reply", "cred.fingerprints": "sealed-reply",
	"cred.forget": "cred-forget-reply",

	"registry.search": "registry-search-reply", "registry.get": "install-plan",

	"chat.send": "chat-send-reply", "chat.history": "chat-history-reply", "chat.list": "chat-list-reply",
	"chat.delete": "chat-conversation-ref", "chat.cancel": "chat-cancel-reply", "chat.approve": "chat-approve-request",
	"chat.answer": "chat-answer-request", "chat.pending": "chat-pending-reply", "chat.watch": "chat-watch-reply", "chat.profiles.put": "chat-profile", "chat.profiles.get": "chat-profile",
	"chat.profiles.list": "chat-profile-list-reply", "chat.profiles.delete": "chat-profile-ref",

	"oauth.start": "oauth-start-reply", "oauth.callback": "oauth-callback-reply", "gateway.retry": "gateway-retry-reply",

	"task.create": "task", "task.get": "task", "task.result": "task", "task.cancel": "task", "task.list": "task-list-reply",

	"approvals.list": "approvals-list-reply", "approvals.decide": "held-call",
	"approvals.rules-get": "approval-rules", "approvals.rules-put": "approval-rules",

	"tokens.revoke": "token-revocation",

	"keys.create": "key-create-reply", "keys.list": "key-list-reply", "keys.revoke": "api-key",

	"agents.create": "agent", "agents.list": "agent-list-reply", "agents.revoke": "agent-ref",
}

// eventSchema is the schema of each event kind (mcp.v1.events.<kind>.<server>,
// mcp.v1.events.chat.<conversation>).
var eventSchema = map[string]string{"status": "status", "call": "call-event", "config": "config-event", "cred": "cred-event", "chat": "chat-event", "oauth": "oauth-event",
	"task": "task", chatAudit: "chat-audit-event", "tool_changed": "tool-changed-event", "tool_reviewed": "tool-reviewed-event", "gateway": "gateway-audit-event",
	"resource_updated": "resource-updated-event", "list_changed": "list-changed-event"}

// chatAudit is the kind of mcp.v1.events.chat.<conversation>.audit.
const chatAudit = "chat-audit"

// eventKind is the kind of an event subject after <prefix>.events.
func eventKind(rest string) string {
	kind, _, _ := strings.Cut(rest, ".")
	if kind == "chat" && strings.HasSuffix(rest, ".audit") {
		return chatAudit
	}
	return kind
}

// outcomes counts the answers of one request kind.
type outcomes struct{ ok, failed int }

// unanswered lists the recorded requests (cancellations aside) that have no reply yet.
func unanswered(msgs []captured, s bus.Subjects) []string {
	waiting := map[string]string{}
	for _, m := range msgs {
		if k := kindOf(m.Subject, s); k != "" && k != "cancel" && m.Reply != "" {
			waiting[m.Reply] = m.Subject
		}
	}
	for _, m := range msgs {
		delete(waiting, m.Subject)
	}
	out := make([]string, 0, len(waiting))
	for _, subject := range waiting {
		out = append(out, subject)
	}
	return out
}

// checkBus validates every recorded message of the bus protocol: requests by
// subject, replies by the request they answer, progress by the subject named
// in the call, events by subject, and KV writes by bucket. It returns the
// answers per request kind.
func checkBus(t *testing.T, reg *registry, msgs []captured, s bus.Subjects, bad deliberate) map[string]outcomes {
	t.Helper()
	byReply := map[string]*request{}
	progressSubjects := map[string]string{} // subject → request id
	clientSubjects := map[string]string{}   // subject → request id
	replies := map[string]int{}
	tally := map[string]outcomes{}
	for _, m := range msgs {
		kind := kindOf(m.Subject, s)
		if kind == "" {
			continue
		}
		src := "bus " + m.Subject
		if reg.channelFor(m.Subject) == "" {
			t.Errorf("%s: no channel of asyncapi.yaml has this subject", src)
		}
		invalid := bad.has(kind, m.Data)
		if invalid {
			if reg.validate(requestSchema[kind], m.Data) == nil {
				t.Errorf("%s: %s accepts the request %s, sent against it on purpose", src, requestSchema[kind], m.Data)
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
			if p := m.Header.Get(bus.HeaderClientSubject); p != "" {
				clientSubjects[p] = m.Header.Get(bus.HeaderRequestID)
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
			o := tally[req.kind]
			if checkReply(t, reg, req, m) {
				o.ok++
			} else {
				o.failed++
			}
			tally[req.kind] = o
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
		if id, ok := clientSubjects[m.Subject]; ok {
			src := "bus client request of " + id
			if reg.check(t, "client-request", src, m.Data) {
				var req model.ClientRequest
				_ = json.Unmarshal(m.Data, &req)
				if req.RequestID != id || req.Method != model.MethodElicit {
					t.Errorf("%s: request_id %q, method %q", src, req.RequestID, req.Method)
				}
			}
			continue
		}
		rest, ok := strings.CutPrefix(m.Subject, s.Prefix+".events.")
		if !ok {
			// An agent's own copy of an event: <prefix>.agent.<name>.events.<kind>.<server>.
			if tok := strings.SplitN(strings.TrimPrefix(m.Subject, s.Prefix+"."), ".", 4); len(tok) == 4 && tok[0] == "agent" && tok[2] == "events" {
				rest, ok = tok[3], true
			}
		}
		if ok {
			src := "bus " + m.Subject
			if reg.channelFor(m.Subject) == "" {
				t.Errorf("%s: no channel of asyncapi.yaml has this subject", src)
			}
			kind := eventKind(rest)
			if name, ok := eventSchema[kind]; ok {
				reg.check(t, name, src, m.Data)
			} else {
				t.Errorf("%s: an event kind without a schema", src)
			}
			continue
		}
		if strings.HasPrefix(m.Subject, s.Service("chat", "log")+".") {
			// An append to a conversation log (JetStream publish into MCP_CHAT).
			src := "bus " + m.Subject
			if reg.channelFor(m.Subject) == "" {
				t.Errorf("%s: no channel of asyncapi.yaml has this subject", src)
			}
			reg.check(t, "chat-entry", src, m.Data)
			continue
		}
		if strings.HasPrefix(m.Subject, s.TaskRun("")) {
			// A task's run queued (JetStream publish into MCP_TASKS).
			src := "bus " + m.Subject
			if reg.channelFor(m.Subject) == "" {
				t.Errorf("%s: no channel of asyncapi.yaml has this subject", src)
			}
			reg.check(t, "task-run", src, m.Data)
			continue
		}
		if strings.HasPrefix(m.Subject, s.Audit("")) {
			// A record appended to a writer's audit chain (JetStream publish into MCP_AUDIT).
			src := "bus " + m.Subject
			if reg.channelFor(m.Subject) == "" {
				t.Errorf("%s: no channel of asyncapi.yaml has this subject", src)
			}
			reg.check(t, "audit-record", src, m.Data)
			continue
		}
		if strings.HasPrefix(m.Subject, s.Prefix+".") && kindOf(m.Subject, s) == "" {
			t.Errorf("bus %s: a subject of the protocol without a schema", m.Subject)
		}
		checkKVWrite(t, reg, m)
	}
	for reply, req := range byReply {
		if replies[reply] != 1 {
			t.Errorf("%s (%s): %d replies recorded, want 1", req.Subject, clip(req.Data), replies[reply])
		}
	}
	if len(progressSubjects) == 0 {
		t.Error("no call asked for progress")
	}
	if len(clientSubjects) == 0 {
		t.Error("no call named a client subject")
	}
	return tally
}

// checkReply validates the reply m to req: an error reply by its headers and
// error.json, a success by the reply schema of the request kind. It reports
// whether the reply was a success.
func checkReply(t *testing.T, reg *registry, req *request, m captured) bool {
	t.Helper()
	src := fmt.Sprintf("bus reply of %s %s", req.Subject, clip(req.Data))
	if status := m.Header.Get(bus.HeaderErrorCode); status != "" {
		reg.checkHeaders(t, "ErrorHeaders", src, m.Header)
		if !reg.check(t, "error", src, m.Data) {
			return false
		}
		var e apierr.Error
		_ = json.Unmarshal(m.Data, &e)
		if want := strconv.Itoa(e.Code.HTTPStatus()); status != want {
			t.Errorf("%s: %s is %s, want %s for %s", src, bus.HeaderErrorCode, status, want, e.Code)
		}
		if got := m.Header.Get(bus.HeaderError); got != e.Message {
			t.Errorf("%s: %s is %q, body message %q", src, bus.HeaderError, got, e.Message)
		}
		return false
	}
	if m.Header.Get(bus.HeaderError) != "" {
		t.Errorf("%s: %s without %s", src, bus.HeaderError, bus.HeaderErrorCode)
	}
	if req.invalid {
		t.Errorf("%s: an invalid request got a success reply: %s", src, clip(m.Data))
		return true
	}
	if name, ok := replySchema[req.kind]; ok {
		if reg.check(t, name, src, m.Data) {
			switch req.kind {
			case "config.history":
				checkHistory(t, src, m.Data)
			case "config.export":
				checkExport(t, reg, src, m.Data)
			}
		}
		return true
	}
	switch req.kind {
	case "tools.search":
		reg.check(t, "tools-search-reply", src, m.Data)
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
	case "rpc":
		v, err := decode(m.Data)
		if err == nil {
			err = reg.asyncSchemas["RpcResult"].Validate(v)
		}
		if err != nil {
			t.Errorf("%s: does not match RpcResult: %v\nbody: %s", src, err, clip(m.Data))
		}
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
	return true
}

// checkHistory checks what the schema cannot: each put carries the config
// as written at that entry's revision.
func checkHistory(t *testing.T, src string, data []byte) {
	t.Helper()
	var h model.ConfigHistoryReply
	if err := json.Unmarshal(data, &h); err != nil {
		t.Fatalf("%s: %v", src, err)
	}
	for i, r := range h.Revisions {
		if i > 0 && r.Revision <= h.Revisions[i-1].Revision {
			t.Errorf("%s: revisions not oldest first: %d after %d", src, r.Revision, h.Revisions[i-1].Revision)
		}
		if r.Config != nil && r.Config.Revision != r.Revision {
			t.Errorf("%s: revision %d carries a config of revision %d", src, r.Revision, r.Config.Revision)
		}
	}
}

// checkExport validates an export in mcpbus's own format as a servers file:
// what config.export writes, config.import and `mcpbus up --config` must read.
func checkExport(t *testing.T, reg *registry, src string, data []byte) {
	t.Helper()
	var out model.ConfigExportReply
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("%s: %v", src, err)
	}
	if out.Format != model.FormatServers {
		return // the formats of other tools have no schema here
	}
	doc, err := yaml.YAMLToJSON([]byte(out.Content))
	if err != nil {
		t.Errorf("%s: the exported file is neither JSON nor YAML: %v", src, err)
		return
	}
	reg.check(t, "servers-file", src+" (content)", doc)
}

// checkVerbs checks that the test drove every verb of the control-plane
// services to a success, and each service to at least one error reply.
func checkVerbs(t *testing.T, tally map[string]outcomes) {
	t.Helper()
	for service, verbs := range controlVerbs() {
		failed := 0
		for _, verb := range verbs {
			o := tally[service+"."+verb]
			if o.ok == 0 {
				t.Errorf("%s.%s: no success reply recorded (%d errors)", service, verb, o.failed)
			}
			failed += o.failed
		}
		if failed == 0 {
			t.Errorf("service %s: no error reply recorded", service)
		}
	}
	var lines []string
	for kind, o := range tally {
		lines = append(lines, fmt.Sprintf("%s %d/%d", kind, o.ok, o.failed))
	}
	sort.Strings(lines)
	t.Logf("replies (ok/error): %s", strings.Join(lines, ", "))
}

// kvRule is how the values of a shared KV bucket are checked.
type kvRule struct {
	schema string
	// plain values are text, not JSON: they are checked as a JSON string.
	plain bool
	// history: every stored revision is checked, not only the latest.
	history bool
}

// kvRules covers every bucket of the contract ($KV.<bucket>.<key>).
var kvRules = map[string]kvRule{
	bus.BucketConfigs:      {schema: "mcp-config", history: true},
	bus.BucketStatus:       {schema: "status"},
	bus.BucketTools:        {schema: "catalog"},
	bus.BucketSlugs:        {schema: "slug-reservation", plain: true},
	bus.BucketChatProfiles: {schema: "chat-profile", history: true},
	bus.BucketAgents:       {schema: "agent-record"},
}

// internalBuckets belong to one service and are not part of the contract:
// the runners' leases and tool pins (read through mcp.v1.tools.review), the
// registry service's cache of registry answers, and the chat service's turn
// leases and pending approvals (read through mcp.v1.chat.pending), and the
// gateways' pending OAuth flows, and the runners' task records (the task
// with its run's arguments; read through mcp.v1.task.*), and the gateways'
// approval rules and held calls (read through mcp.v1.approvals.*) and
// token revocations (written through mcp.v1.tokens.revoke), and the
// gateways' API keys (with the hash of their secret; read through
// mcp.v1.keys.*).
var internalBuckets = map[string]bool{bus.BucketOwners: true, bus.BucketPins: true, regsvc.BucketCache: true,
	bus.BucketChatTurns: true, bus.BucketChatApprovals: true, bus.BucketOAuthFlows: true, bus.BucketTasks: true,
	bus.BucketApprovalRules: true, bus.BucketApprovals: true, jwtauth.BucketRevocations: true, auth.BucketAPIKeys: true}

// kvValue is the document a KV value is validated as.
func kvValue(t *testing.T, rule kvRule, value []byte) []byte {
	if !rule.plain {
		return value
	}
	return mustJSON(t, string(value))
}

// checkKVWrite validates a write into a KV bucket ($KV.<bucket>.<key>).
func checkKVWrite(t *testing.T, reg *registry, m captured) {
	t.Helper()
	rest, ok := strings.CutPrefix(m.Subject, "$KV.")
	if !ok {
		return
	}
	bucket, key, _ := strings.Cut(rest, ".")
	if internalBuckets[bucket] {
		return
	}
	src := "bus " + m.Subject
	rule, ok := kvRules[bucket]
	if !ok {
		t.Errorf("%s: a KV bucket without a schema", src)
		return
	}
	if reg.channelFor(m.Subject) == "" {
		t.Errorf("%s: no channel of asyncapi.yaml has this subject", src)
	}
	if bucket != bus.BucketConfigs && !model.ValidSlug(key) {
		t.Errorf("%s: the key is not a slug", src)
	}
	if op := m.Header.Get("KV-Operation"); op != "" {
		if len(m.Data) != 0 {
			t.Errorf("%s: %s with a body", src, op)
		}
		return
	}
	reg.check(t, rule.schema, src, kvValue(t, rule, m.Data))
}

// checkStream validates every event stored in MCP_EVENTS.
// checkAuditExport checks what `mcpbus audit export` writes of the recorded
// audit stream (a file, not a message, so it is checked here): the records as
// stored and the writers' keys, as audit-bundle.json says.
func checkAuditExport(t *testing.T, reg *registry, js jetstream.JetStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var entries []audit.Entry
	fromStart, err := audit.ReadStream(ctx, js, audit.From{}, 2*time.Second, func(e audit.Entry) { entries = append(entries, e) })
	if err != nil {
		t.Fatalf("reading the audit stream: %v", err)
	}
	if len(entries) == 0 {
		t.Fatal("the services wrote no audit record")
	}
	keys := audit.Keys{}
	for _, e := range entries {
		var rec audit.Record
		if err := json.Unmarshal(e.Data, &rec); err != nil {
			t.Fatalf("audit record %d: %v", e.StreamSeq, err)
		}
		if role, key, ok := audit.SplitChain(rec.Chain); ok {
			keys[key] = audit.Identity{Name: role, Role: role}
		}
	}
	data, err := json.Marshal(audit.Bundle{Format: audit.BundleFormat, ExportedAt: time.Now().UTC(), FromStart: fromStart, Keys: keys, Entries: entries})
	if err != nil {
		t.Fatal(err)
	}
	reg.check(t, "audit-bundle", "audit export", data)
}

func checkStream(t *testing.T, reg *registry, js jetstream.JetStream, s bus.Subjects) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatalf("reading event %d: %v", seq, err)
		}
		src := fmt.Sprintf("stream %s #%d", m.Subject, seq)
		kind := eventKind(strings.TrimPrefix(m.Subject, s.Prefix+".events."))
		name, ok := eventSchema[kind]
		if !ok {
			t.Errorf("%s: an event without a schema", src)
			continue
		}
		kinds[kind]++
		reg.check(t, name, src, m.Data)
	}
	for kind := range eventSchema {
		if kinds[kind] == 0 {
			t.Errorf("the stream MCP_EVENTS holds no %s events", kind)
		}
	}
}

// checkKV validates the current values (and the config history) of the shared buckets.
func checkKV(t *testing.T, reg *registry, js jetstream.JetStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for bucket, rule := range kvRules {
		kv, err := js.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatalf("bucket %s: %v", bucket, err)
		}
		lister, err := kv.ListKeys(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for k := range lister.Keys() {
			keys = append(keys, k)
		}
		if len(keys) == 0 {
			t.Errorf("bucket %s is empty", bucket)
		}
		for _, key := range keys {
			var entries []jetstream.KeyValueEntry
			if rule.history {
				if entries, err = kv.History(ctx, key); err != nil {
					t.Fatal(err)
				}
			} else {
				e, err := kv.Get(ctx, key)
				if errors.Is(err, jetstream.ErrKeyNotFound) {
					continue // deleted since it was listed (a server stopping)
				}
				if err != nil {
					t.Fatal(err)
				}
				entries = append(entries, e)
			}
			for _, e := range entries {
				if e.Operation() != jetstream.KeyValuePut {
					continue
				}
				reg.check(t, rule.schema, fmt.Sprintf("kv %s/%s@%d", bucket, key, e.Revision()), kvValue(t, rule, e.Value()))
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
