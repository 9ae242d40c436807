// Package client is the Go agent library of mcpbus: list tools, call them by
// server and tool or by namespaced name, control servers and follow events,
// over plain NATS subjects. The CLI, the gateway and the chat service use it.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/model"
)

// Options configure a client.
type Options struct {
	Prefix string
	// Timeout bounds requests whose context has no deadline (default 35s: a
	// little over the runner's 30s call timeout, so the runner's answer wins).
	Timeout time.Duration
	// Agent, when set, is the agent whose identity the connection has: tool
	// requests (tools.list, call, rpc, cancel) go to its own subjects under
	// <prefix>.agent.<name>, the only ones the bus lets it publish.
	Agent string
	// MayPublish, when set, turns on the in-process hand-off of tool calls
	// (bus.RequestLocal): a call whose server is served by a runner in this
	// process skips NATS. It must say what the connection's identity may
	// publish, as the server enforces it on the bus.
	MayPublish func(subject string) bool
	// Tie, when set, ties each tool call sent over NATS to what may end it
	// early (see TieFunc): the gateway's and the chat service's tie calls to
	// their runner's lease (runnerwatch) and to their connection's drops
	// (lostreplies).
	Tie TieFunc
}

// TieFunc ties a tool call sent over NATS (its server, tool and request id)
// to an outcome NATS cannot tell its caller (the call would wait out its
// timeout): it returns the call's context, which ends with an error saying
// why (wrapping ErrRunnerGone, if the runner serving the call died), and
// its release, called once the call is over.
type TieFunc func(ctx context.Context, server, tool, requestID string) (context.Context, context.CancelFunc)

// Ties chains ties: a call's context ends with the first that ends it.
func Ties(ties ...TieFunc) TieFunc {
	return func(ctx context.Context, server, tool, requestID string) (context.Context, context.CancelFunc) {
		releases := make([]context.CancelFunc, 0, len(ties))
		for _, tie := range ties {
			var release context.CancelFunc
			ctx, release = tie(ctx, server, tool, requestID)
			releases = append(releases, release)
		}
		return ctx, func() {
			for i := len(releases) - 1; i >= 0; i-- {
				releases[i]()
			}
		}
	}
}

// ErrRunnerGone is wrapped by the error of a call whose runner died during
// it (Options.Tie): the call may or may not have run.
var ErrRunnerGone = errors.New("the runner serving the call is gone")

// Client talks to mcpbus over one NATS connection.
type Client struct {
	nc   *nats.Conn
	subj bus.Subjects
	// tools builds the tool requests' subjects (subj, or the agent's own).
	tools   bus.Subjects
	timeout time.Duration
	// mayPublish: see Options.MayPublish (nil: every call goes over NATS).
	mayPublish func(string) bool
	tie        TieFunc
	// seal seals secrets to the credential service (config writes).
	sealOnce sync.Once
	seal     *credclient.Sealer
}

// New returns a client on nc.
func New(nc *nats.Conn, opts Options) *Client {
	if opts.Timeout <= 0 {
		opts.Timeout = 35 * time.Second
	}
	subj := bus.NewSubjects(opts.Prefix)
	tools := subj
	if opts.Agent != "" {
		tools = subj.ForAgent(opts.Agent)
	}
	return &Client{nc: nc, subj: subj, tools: tools, timeout: opts.Timeout, mayPublish: opts.MayPublish, tie: opts.Tie}
}

// Subjects returns the subject builder in use.
func (c *Client) Subjects() bus.Subjects { return c.subj }

// ListTools returns the catalog of running servers (all, or one server's).
func (c *Client) ListTools(ctx context.Context, server string) ([]model.Tool, error) {
	var out model.ToolsListReply
	if err := bus.RequestJSON(ctx, c.nc, c.tools.ToolsList(), model.ToolsListRequest{Server: server}, &out, c.timeout); err != nil {
		return nil, err
	}
	return out.Tools, nil
}

// SearchTools returns the tools that best match query (at most limit; 0
// means the service's default), best first.
func (c *Client) SearchTools(ctx context.Context, query string, limit int) (model.ToolsSearchReply, error) {
	var out model.ToolsSearchReply
	err := bus.RequestJSON(ctx, c.nc, c.tools.ToolsSearch(), model.ToolsSearchRequest{Query: query, Limit: limit}, &out, c.timeout)
	return out, err
}

// CallOptions tune one call.
type CallOptions struct {
	// OnProgress receives the MCP progress notifications of the call.
	OnProgress func(model.ProgressEvent)
	// RequestID overrides the generated request id.
	RequestID string
	// OnClientRequest answers the MCP server's own requests during the call
	// (model.MethodElicit, model.MethodCreateMessage) with their MCP result
	// (e.g. *mcp.ElicitResult), or an error the server sees as a JSON-RPC
	// error. Without it the runner has no one to ask and the server's
	// request fails.
	OnClientRequest func(ctx context.Context, req model.ClientRequest) (any, error)
}

// Call calls tool (its original name) of server with args (a JSON object or
// nil) and returns the raw CallToolResult JSON. If ctx ends first, the runner
// is told to cancel the call at the MCP server.
func (c *Client) Call(ctx context.Context, server, tool string, args json.RawMessage, opts *CallOptions) (json.RawMessage, error) {
	res, err := c.CallResult(ctx, server, tool, args, opts)
	return res.Data, err
}

// Result is a tool call's reply.
type Result struct {
	// Data is the CallToolResult as JSON.
	Data json.RawMessage
	// Checked says the runner checked Data is a CallToolResult (a JSON object
	// with a content array, bus.HeaderToolResult); IsError is then its
	// isError. Unchecked (an older runner), the caller decodes Data to know.
	Checked, IsError bool
}

// CallResult is Call with what the runner says of the result, so that a
// caller passing the result on need not decode it again.
func (c *Client) CallResult(ctx context.Context, server, tool string, args json.RawMessage, opts *CallOptions) (Result, error) {
	if !model.ValidSlug(server) {
		return Result{}, apierr.Invalid("server", "server must be a slug ([a-z0-9_-])")
	}
	if tool == "" {
		return Result{}, apierr.Invalid("tool", "tool is required")
	}
	if opts == nil {
		opts = &CallOptions{}
	}
	msg := nats.NewMsg(c.tools.Call(server, model.ToolToken(tool)))
	msg.Data = args
	reqID := opts.RequestID
	if reqID == "" {
		reqID = uuid.NewString()
	}
	msg.Header.Set(bus.HeaderRequestID, reqID)
	if opts.OnProgress != nil {
		stop, err := c.followProgress(msg, opts.OnProgress)
		if err != nil {
			return Result{}, err
		}
		// Runs after the reply: progress published before it is delivered too.
		defer stop()
	}
	if opts.OnClientRequest != nil {
		stop, err := c.answerClientRequests(ctx, msg, opts.OnClientRequest)
		if err != nil {
			return Result{}, err
		}
		defer stop()
	}
	reply, err := c.requestMoved(ctx, server, tool, msg, opts)
	if err != nil {
		if errors.Is(err, nats.ErrMaxPayload) {
			return Result{}, apierr.Wrap(apierr.Validation, fmt.Sprintf("the arguments (%d bytes) with the call's headers are larger than the bus carries (max_payload %d bytes)",
				len(args), c.nc.MaxPayload()), err).WithField("arguments")
		}
		if apierr.Of(err) == apierr.ServiceUnavailable && errors.Is(err, nats.ErrNoResponders) {
			// The cause stays: a caller that knows the tool (the gateway's
			// catalog) reports an outage instead.
			return Result{}, apierr.Wrap(apierr.NotFound, "server "+server+" not found or not running", err).WithField("server")
		}
		if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrRunnerGone) {
			// A runner thought gone may still be running the call.
			c.cancel(server, reqID)
		}
		return Result{}, err
	}
	res := Result{Data: reply.Data}
	switch reply.Header.Get(bus.HeaderToolResult) {
	case bus.ToolResultOK:
		res.Checked = true
	case bus.ToolResultError:
		res.Checked, res.IsError = true, true
	}
	return res, nil
}

// requestMoved is request, sent again while the answer is that the call
// did not run because its runner let the server go (bus.ErrNotRun: a
// handover, a lease that lapsed while the runner was cut off or frozen),
// and, after such an answer, while no runner serves the server yet (the new
// owner subscribes a moment later). Each try ran nowhere, so the call runs
// at most once. It gives up after movedWait or at ctx's end.
func (c *Client) requestMoved(ctx context.Context, server, tool string, msg *nats.Msg, opts *CallOptions) (*nats.Msg, error) {
	reply, err := c.request(ctx, server, tool, msg, opts)
	if !errors.Is(err, bus.ErrNotRun) {
		return reply, err
	}
	end := time.Now().Add(movedWait)
	for wait := 50 * time.Millisecond; errors.Is(err, bus.ErrNotRun) || errors.Is(err, nats.ErrNoResponders); wait = min(2*wait, time.Second) {
		if time.Now().Add(wait).After(end) {
			return reply, err
		}
		select {
		case <-ctx.Done():
			return reply, err
		case <-time.After(wait):
		}
		reply, err = c.request(ctx, server, tool, msg, opts)
	}
	return reply, err
}

// movedWait bounds the tries of a call whose runner let its server go: a
// takeover after a lapsed lease starts at once (the lease is gone by then),
// a handover takes one ownership pass of the new owner.
const movedWait = 10 * time.Second

// request sends a tool call: to a runner in this process when one serves it
// and the call needs no inbox of its own (progress, the server's requests),
// else over NATS.
func (c *Client) request(ctx context.Context, server, tool string, msg *nats.Msg, opts *CallOptions) (*nats.Msg, error) {
	if c.mayPublish != nil && opts.OnProgress == nil && opts.OnClientRequest == nil {
		if reply, ok, err := bus.RequestLocal(ctx, c.nc, msg, c.timeout, c.mayPublish); ok {
			return reply, err // a runner in this process dies with it
		}
	}
	if c.tie == nil {
		return bus.Request(ctx, c.nc, msg, c.timeout)
	}
	tctx, release := c.tie(ctx, server, tool, msg.Header.Get(bus.HeaderRequestID))
	defer release()
	reply, err := bus.Request(tctx, c.nc, msg, c.timeout)
	if err != nil && ctx.Err() == nil && tctx.Err() != nil {
		return nil, context.Cause(tctx) // a tie ended the call: its error says why
	}
	return reply, err
}

// followProgress subscribes an inbox for the call's progress notifications
// and names it in the request. The runner publishes them before the reply and
// NATS keeps that order, so stop, called once the reply is in, delivers every
// one still buffered before it returns.
func (c *Client) followProgress(msg *nats.Msg, fn func(model.ProgressEvent)) (stop func(), err error) {
	inbox := c.nc.NewRespInbox()
	ch := make(chan *nats.Msg, 64)
	sub, err := c.nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil, apierr.Wrap(apierr.Network, "subscribing for progress", err)
	}
	msg.Header.Set(bus.HeaderProgressSubject, inbox)
	deliver := func(m *nats.Msg) {
		var ev model.ProgressEvent
		if json.Unmarshal(m.Data, &ev) == nil {
			fn(ev)
		}
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case m := <-ch:
				deliver(m)
			case <-quit:
				return
			}
		}
	}()
	return func() {
		close(quit)
		<-done
		_ = sub.Unsubscribe()
		for {
			select {
			case m := <-ch:
				deliver(m)
			default:
				return
			}
		}
	}, nil
}

// cancel tells every replica of server that the caller gave up on reqID.
func (c *Client) cancel(server, reqID string) {
	data, _ := json.Marshal(map[string]string{"request_id": reqID})
	msg := nats.NewMsg(c.tools.Cancel(server))
	msg.Header.Set(bus.HeaderRequestID, reqID)
	msg.Data = data
	_ = c.nc.PublishMsg(msg)
}

// CallNamed calls a tool by its namespaced name (<server>__<tool>), looking it
// up in the catalog so shortened or sanitised names resolve.
func (c *Client) CallNamed(ctx context.Context, name string, args json.RawMessage, opts *CallOptions) (json.RawMessage, error) {
	malformed := func() error { return apierr.Invalid("name", "a namespaced tool name looks like <server>__<tool>") }
	server, _, ok := strings.Cut(name, "__")
	separated := ok && model.ValidSlug(server)
	if !separated {
		if !model.ValidName(name) {
			return nil, malformed()
		}
		// A name shortened to 64 characters (a long slug) may have lost its
		// "__" to the hash suffix: look in the whole catalog.
		server = ""
	}
	tools, err := c.ListTools(ctx, server)
	if err != nil {
		return nil, err
	}
	for _, t := range tools {
		if t.Name == name {
			return c.Call(ctx, t.Server, t.Tool, args, opts)
		}
	}
	if !separated {
		return nil, malformed() // no listed name, and not of the form either
	}
	return nil, apierr.Newf(apierr.NotFound, "tool %s not found", name).WithField("name")
}

// RPC sends another MCP method (resources/list, prompts/get, ping …) to server
// and decodes the result into out (may be nil).
func (c *Client) RPC(ctx context.Context, server, method string, params any, out any) error {
	if !model.ValidSlug(server) {
		return apierr.Invalid("server", "server must be a slug ([a-z0-9_-])")
	}
	req := model.RPCRequest{Method: method}
	if params != nil {
		b, err := json.Marshal(params)
		if err != nil {
			return apierr.Invalid("params", "params cannot be encoded: "+err.Error())
		}
		req.Params = b
	}
	err := bus.RequestJSON(ctx, c.nc, c.tools.RPC(server), req, out, c.timeout)
	if errors.Is(err, nats.ErrNoResponders) {
		return apierr.Newf(apierr.NotFound, "server %s not found or not running", server).WithField("server")
	}
	return err
}

// Runtime asks for start, stop, restart or status of one server.
func (c *Client) Runtime(ctx context.Context, verb, server string) (model.Status, error) {
	var st model.Status
	err := bus.RequestJSON(ctx, c.nc, c.subj.Runtime(verb), model.RuntimeRequest{Server: server}, &st, 2*time.Minute)
	return st, err
}

// Status returns the status of every known server.
func (c *Client) Status(ctx context.Context) ([]model.Status, error) {
	var out model.RuntimeStatusReply
	if err := bus.RequestJSON(ctx, c.nc, c.subj.Runtime("status"), model.RuntimeRequest{}, &out, c.timeout); err != nil {
		return nil, err
	}
	return out.Servers, nil
}

// Event is one message of the event stream.
type Event struct {
	Subject string
	Kind    string // status, config, call, chat
	Name    string // server or session
	Data    json.RawMessage
	Time    time.Time
}

// FollowEvents delivers events matching filter (a subject under the events
// prefix, "" for all) to fn until ctx ends. With replay, it starts from the
// oldest stored event; otherwise from new ones only.
func (c *Client) FollowEvents(ctx context.Context, filter string, replay bool, fn func(Event)) error {
	js, err := jetstream.New(c.nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	if filter == "" {
		filter = c.subj.Events()
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}, DeliverPolicy: jetstream.DeliverNewPolicy}
	if replay {
		cfg.DeliverPolicy = jetstream.DeliverAllPolicy
	}
	setup, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if !replay {
		// Recreated on another node after its own is lost, the consumer
		// goes on from here rather than from what is new then.
		if _, err := bus.StartAfterLast(setup, js, bus.StreamEvents, &cfg); err != nil {
			return apierr.Wrap(apierr.ServiceUnavailable, "following events: "+err.Error(), err)
		}
	}
	cons, err := js.OrderedConsumer(setup, bus.StreamEvents, cfg)
	if err != nil {
		return apierr.Wrap(apierr.ServiceUnavailable, "following events: "+err.Error(), err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		ev := Event{Subject: m.Subject(), Data: m.Data()}
		ev.Kind = bus.TokenAt(strings.TrimPrefix(m.Subject(), c.subj.Prefix+"."), 1)
		ev.Name = bus.TokenAt(strings.TrimPrefix(m.Subject(), c.subj.Prefix+"."), 2)
		if md, err := m.Metadata(); err == nil {
			ev.Time = md.Timestamp
		}
		fn(ev)
	})
	if err != nil {
		return apierr.Wrap(apierr.ServiceUnavailable, "following events: "+err.Error(), err)
	}
	<-ctx.Done()
	cc.Stop()
	return nil
}
