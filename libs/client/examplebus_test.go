package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testmcp"
)

// exampleBus is what the examples talk to: an embedded NATS server with
// JetStream, and a stand-in for one mcpbus runner that serves the test MCP
// server (libs/testmcp) as "demo".
//
// The stand-in exists because libs cannot import the real runner (the
// services/runner module depends on libs). It answers the runner's subjects
// as the runner does: micro services named like the runner's (so client
// Runners finds it), the reply types of libs/model, error replies through
// bus.RespondError, results and progress from a real go-sdk session with the
// test server (in memory, not a child process), and the status and call
// events a runner publishes. It implements only what the examples use.
type exampleBus struct {
	// URL is the NATS client URL, as an agent would be given it.
	URL string

	ns    *embednats.Server
	nc    *nats.Conn
	dir   string
	subj  bus.Subjects
	sess  *mcp.ClientSession
	tools map[string]*mcp.Tool // subject token → tool
	cat   []model.Tool
	calls atomic.Uint64
	// progress maps a call's progress token to where its notifications go.
	progress sync.Map
	started  time.Time
	svcs     []micro.Service
}

const (
	exampleServer = "demo"
	exampleRunner = "r1"
)

// startExampleBus starts a fresh bus for one example; it panics on failure,
// as examples have no *testing.T.
func startExampleBus() *exampleBus {
	b, err := newExampleBus()
	if err != nil {
		panic(err)
	}
	return b
}

func newExampleBus() (b *exampleBus, err error) {
	b = &exampleBus{subj: bus.NewSubjects(""), tools: map[string]*mcp.Tool{}, started: time.Now().UTC()}
	defer func() {
		if err != nil {
			b.Stop()
		}
	}()
	if b.dir, err = os.MkdirTemp("", "client-example"); err != nil {
		return b, err
	}
	if b.ns, err = embednats.Start(embednats.Options{Port: -1, StoreDir: b.dir}); err != nil {
		return b, err
	}
	b.URL = b.ns.ClientURL()
	if b.nc, err = b.ns.Connect(); err != nil {
		return b, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := jetstream.New(b.nc)
	if err != nil {
		return b, err
	}
	if _, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: bus.StreamEvents, Subjects: []string{b.subj.Events()}}); err != nil {
		return b, err
	}

	// The MCP session a runner would hold with the server's process.
	st, ct := mcp.NewInMemoryTransports()
	if _, err = testmcp.NewServer(exampleServer).Connect(ctx, st, nil); err != nil {
		return b, err
	}
	mc := mcp.NewClient(&mcp.Implementation{Name: "mcpbus-runner", Version: "example"},
		&mcp.ClientOptions{ProgressNotificationHandler: b.onProgress})
	if b.sess, err = mc.Connect(ctx, ct, nil); err != nil {
		return b, err
	}
	list, err := b.sess.ListTools(ctx, nil)
	if err != nil {
		return b, err
	}
	for _, t := range list.Tools {
		token := model.ToolToken(t.Name)
		b.tools[token] = t
		schema, _ := json.Marshal(t.InputSchema)
		b.cat = append(b.cat, model.Tool{
			Name: model.NamespacedName(exampleServer, t.Name), Server: exampleServer, Tool: t.Name,
			Subject: b.subj.Call(exampleServer, token), Title: t.Title, Description: t.Description, InputSchema: schema,
		})
	}
	sort.Slice(b.cat, func(i, j int) bool { return b.cat[i].Tool < b.cat[j].Tool })

	if err = b.serve(); err != nil {
		return b, err
	}
	status, _ := json.Marshal(b.status())
	if _, err = js.Publish(ctx, b.subj.Event("status", exampleServer), status); err != nil {
		return b, err
	}
	return b, nil
}

// serve registers the runner's endpoints and the server's, as micro services.
func (b *exampleBus) serve() error {
	runner, err := micro.AddService(b.nc, micro.Config{Name: "mcpbus-runner", Version: "0.1.0",
		Metadata: map[string]string{"runner": exampleRunner}, QueueGroup: "mcpbus-runner"})
	if err != nil {
		return err
	}
	b.svcs = append(b.svcs, runner)
	server, err := micro.AddService(b.nc, micro.Config{Name: "mcpbus-server", Version: "0.1.0",
		Metadata: map[string]string{"server": exampleServer, "runner": exampleRunner}, QueueGroup: bus.QueueGroup(exampleServer)})
	if err != nil {
		return err
	}
	b.svcs = append(b.svcs, server)
	for _, e := range []struct {
		svc           micro.Service
		name, subject string
		h             micro.HandlerFunc
	}{
		{runner, "tools-list", b.subj.ToolsList(), b.handleToolsList},
		{runner, "runtime-status", b.subj.Runtime("status"), b.handleStatus},
		{server, "call", b.subj.CallAll(exampleServer), func(req micro.Request) { go b.handleCall(req) }},
		{server, "rpc", b.subj.RPC(exampleServer), func(req micro.Request) { go b.handleRPC(req) }},
	} {
		if err := e.svc.AddEndpoint(e.name, e.h, micro.WithEndpointSubject(e.subject)); err != nil {
			return err
		}
	}
	return nil
}

// Stop ends everything the bus started.
func (b *exampleBus) Stop() {
	for _, s := range b.svcs {
		_ = s.Stop()
	}
	if b.sess != nil {
		_ = b.sess.Close()
	}
	if b.nc != nil {
		b.nc.Close()
	}
	if b.ns != nil {
		b.ns.Stop()
	}
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
	}
}

func (b *exampleBus) status() model.Status {
	st := model.Status{Server: exampleServer, State: model.StateRunning, Runner: exampleRunner,
		StartedAt: b.started, UpdatedAt: b.started, Calls: b.calls.Load()}
	for _, t := range b.cat {
		st.Tools = append(st.Tools, t.Tool)
	}
	return st
}

func (b *exampleBus) handleToolsList(req micro.Request) {
	var in model.ToolsListRequest
	_ = json.Unmarshal(req.Data(), &in)
	out := model.ToolsListReply{Tools: []model.Tool{}}
	if in.Server == "" || in.Server == exampleServer {
		out.Tools = append(out.Tools, b.cat...)
	}
	_ = req.RespondJSON(out)
}

func (b *exampleBus) handleStatus(req micro.Request) {
	_ = req.RespondJSON(model.RuntimeStatusReply{Servers: []model.Status{b.status()}})
}

// progressTarget is where one call's progress notifications go; done closes
// when the last one (progress == total) has been forwarded.
type progressTarget struct {
	subject, requestID string
	done               chan struct{}
	once               sync.Once
}

func (b *exampleBus) onProgress(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	token, _ := req.Params.ProgressToken.(string)
	v, ok := b.progress.Load(token)
	if !ok {
		return
	}
	t := v.(*progressTarget)
	data, _ := json.Marshal(model.ProgressEvent{RequestID: t.requestID, Progress: req.Params.Progress,
		Total: req.Params.Total, Message: req.Params.Message})
	_ = b.nc.PublishMsg(&nats.Msg{Subject: t.subject, Data: data, Header: nats.Header{bus.HeaderRequestID: {t.requestID}}})
	if req.Params.Total > 0 && req.Params.Progress >= req.Params.Total {
		t.once.Do(func() { close(t.done) })
	}
}

// handleCall serves call.demo.<tool>: the body is the arguments, the reply
// the CallToolResult, and a call event goes to the event stream.
func (b *exampleBus) handleCall(req micro.Request) {
	start := time.Now()
	h := nats.Header(req.Headers())
	reqID := h.Get(bus.HeaderRequestID)
	token := bus.TokenAt(req.Subject(), 4) // mcp.v1.call.<server>.<tool>
	tool, ok := b.tools[token]
	if !ok {
		_ = bus.RespondError(req, apierr.Newf(apierr.NotFound, "server %s has no tool %q", exampleServer, token))
		return
	}
	args := json.RawMessage(req.Data())
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	params := &mcp.CallToolParams{Name: tool.Name, Arguments: args}
	var target *progressTarget
	if subj := h.Get(bus.HeaderProgressSubject); subj != "" && reqID != "" {
		target = &progressTarget{subject: subj, requestID: reqID, done: make(chan struct{})}
		b.progress.Store(reqID, target)
		defer b.progress.Delete(reqID)
		params.SetProgressToken(reqID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := b.sess.CallTool(ctx, params)
	if target != nil && err == nil {
		// go-sdk may hand the reply over before the last notifications:
		// forward them all first, as the runner does (NATS keeps the order).
		select {
		case <-target.done:
		case <-time.After(5 * time.Second):
		}
	}
	b.calls.Add(1)
	outcome := "ok"
	switch {
	case err != nil:
		outcome = "error"
		_ = bus.RespondError(req, apierr.Wrap(apierr.ServiceUnavailable, fmt.Sprintf("tool %s failed: %v", tool.Name, err), err))
	default:
		if res.IsError {
			outcome = "tool_error"
		}
		data, _ := json.Marshal(res)
		_ = req.Respond(data, micro.WithHeaders(micro.Headers{bus.HeaderRequestID: {reqID}}))
	}
	ev, _ := json.Marshal(model.CallEvent{Server: exampleServer, Tool: tool.Name, RequestID: reqID, Outcome: outcome,
		Code: string(apierr.Of(err)), DurationMS: float64(time.Since(start).Microseconds()) / 1000, At: start.UTC(), Runner: exampleRunner})
	_ = b.nc.Publish(b.subj.Event("call", exampleServer), ev)
}

// handleRPC serves rpc.demo for the methods the examples use.
func (b *exampleBus) handleRPC(req micro.Request) {
	var in model.RPCRequest
	if err := json.Unmarshal(req.Data(), &in); err != nil {
		_ = bus.RespondError(req, apierr.Invalid("", "request must be {\"method\":…, \"params\":{…}}"))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out any
	var err error
	switch in.Method {
	case "ping":
		out, err = struct{}{}, b.sess.Ping(ctx, nil)
	case "resources/read":
		var p mcp.ReadResourceParams
		if err = json.Unmarshal(in.Params, &p); err == nil {
			out, err = b.sess.ReadResource(ctx, &p)
		}
	case "prompts/get":
		var p mcp.GetPromptParams
		if err = json.Unmarshal(in.Params, &p); err == nil {
			out, err = b.sess.GetPrompt(ctx, &p)
		}
	default:
		err = apierr.Invalid("method", "unsupported method "+in.Method)
	}
	if err != nil {
		_ = bus.RespondError(req, err)
		return
	}
	_ = req.RespondJSON(out)
}
