//lint:file-ignore SA1019 sampling and roots are deprecated by protocol 2026-07-28 (SEP-2577) but work for at least twelve months, and servers of older protocols use them: mcpbus relays them.

package runner

import (
	"cmp"
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/deadline"
	"github.com/mcpbus/mcpbus/libs/model"
)

// clientTarget is where the requests an MCP server makes of its client
// during one call go: the subject the caller named in Mcp-Client-Subject.
type clientTarget struct {
	subject   string
	requestID string
	// limit is the call's context: its time limit stops while the caller
	// answers a request for input.
	limit context.Context
}

type clientTargetKey struct{}

func withClientTarget(ctx context.Context, t *clientTarget) context.Context {
	return context.WithValue(ctx, clientTargetKey{}, t)
}

// clientTargets are the operations (calls, rpcs) of one server in flight,
// by session, with the client subject each named (nil: none), for servers
// whose requests arrive without the operation's context.
type clientTargets struct {
	mu        sync.Mutex
	bySession map[*mcp.ClientSession]sessionOps // by value: a call allocates nothing here
}

// sessionOps are one session's operations in flight.
type sessionOps struct {
	n       int
	targets map[*clientTarget]struct{}
}

// enter records an operation in flight on sess (t nil: it named no client
// subject); leave, with the same arguments, ends it.
func (c *clientTargets) enter(sess *mcp.ClientSession, t *clientTarget) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bySession == nil {
		c.bySession = map[*mcp.ClientSession]sessionOps{}
	}
	ops := c.bySession[sess]
	ops.n++
	if t != nil {
		if ops.targets == nil {
			ops.targets = map[*clientTarget]struct{}{}
		}
		ops.targets[t] = struct{}{}
	}
	c.bySession[sess] = ops
}

func (c *clientTargets) leave(sess *mcp.ClientSession, t *clientTarget) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ops, ok := c.bySession[sess]
	if !ok {
		return
	}
	delete(ops.targets, t)
	if ops.n--; ops.n <= 0 {
		delete(c.bySession, sess)
		return
	}
	c.bySession[sess] = ops
}

// only is the client subject of the one operation in flight on sess, or nil
// when there are none or several, or it named none.
func (c *clientTargets) only(sess *mcp.ClientSession) *clientTarget {
	c.mu.Lock()
	defer c.mu.Unlock()
	ops := c.bySession[sess]
	if ops.n != 1 {
		return nil
	}
	for t := range ops.targets {
		return t
	}
	return nil
}

// targetFor picks the caller a server's request on sess goes to. go-sdk
// fulfils the input requests of a multi round-trip result (protocol
// 2026-07-28) under the call's own context, which names its caller. A
// request sent on an older session carries nothing that says which
// operation it serves: it goes to the caller of the only operation in
// flight on that session, when that one named a client subject, and to
// nobody otherwise. With several in flight (a shared session serves every
// caller), one caller must never see, or answer, another's request.
func (s *server) targetFor(ctx context.Context, sess *mcp.ClientSession, method string) (*clientTarget, error) {
	if t, ok := ctx.Value(clientTargetKey{}).(*clientTarget); ok {
		return t, nil
	}
	if t := s.clients.only(sess); t != nil {
		return t, nil
	}
	return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest,
		Message: "mcpbus: no caller to relay " + method + " to (the call was made without Mcp-Client-Subject, or several calls are in flight and the request does not say which it belongs to)"}
}

// relay sends one server-to-client request to the caller as a NATS request
// and decodes its answer into out. ctx is the call's (multi round-trip) or
// the session's (an older protocol's request). A request for input waits
// for a person, up to --input-timeout, and the call's time limit stops
// meanwhile; any other waits no longer than the call.
func (s *server) relay(ctx context.Context, sess *mcp.ClientSession, method string, params any, out any) error {
	t, err := s.targetFor(ctx, sess, method)
	if err != nil {
		return err
	}
	body, err := json.Marshal(params)
	if err != nil {
		return apierr.Wrap(apierr.Internal, "encoding "+method, err)
	}
	data, err := json.Marshal(model.ClientRequest{RequestID: t.requestID, Server: s.slug, Method: method, Params: body})
	if err != nil {
		return apierr.Wrap(apierr.Internal, "encoding "+method, err)
	}
	msg := nats.NewMsg(t.subject)
	msg.Data = data
	if t.requestID != "" {
		msg.Header.Set(bus.HeaderRequestID, t.requestID)
	}
	// Any other request waits within the call: the call's own end ends it
	// (so the call is told it timed out); wait, a second past that end, is
	// a bound of last resort.
	wait := s.r.opts.CallTimeout
	if left, ok := deadline.Left(cmp.Or(t.limit, ctx)); ok {
		wait = left + time.Second
	}
	if method == model.MethodElicit && t.limit != nil {
		defer deadline.Pause(t.limit)()
		wait = s.r.opts.InputTimeout
	}
	// Bounded by wait whatever ctx is, and ended with the call: an older
	// session's request comes on the session's context, not the call's.
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if t.limit != nil {
		defer context.AfterFunc(t.limit, cancel)()
	}
	// Answered into a subject of its own: an agent may write there, and
	// nowhere else of the runner's inbox.
	reply, err := bus.RequestAnswer(ctx, s.r.nc, msg, wait)
	if err != nil {
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "mcpbus: the caller did not answer " + method + ": " + apierr.From(err).Message}
	}
	if err := json.Unmarshal(reply.Data, out); err != nil {
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "mcpbus: the caller's answer to " + method + " is not a result: " + err.Error()}
	}
	return nil
}

func (s *server) onElicit(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	var res mcp.ElicitResult
	if err := s.relay(ctx, req.Session, model.MethodElicit, req.Params, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

func (s *server) onCreateMessage(ctx context.Context, req *mcp.CreateMessageWithToolsRequest) (*mcp.CreateMessageWithToolsResult, error) {
	var res mcp.CreateMessageWithToolsResult
	if err := s.relay(ctx, req.Session, model.MethodCreateMessage, req.Params, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// clientCapabilities are what the runner offers every server: elicitation
// (form) and sampling, relayed to callers that can answer them, and roots
// from the server's config.
func clientCapabilities() *mcp.ClientCapabilities {
	return &mcp.ClientCapabilities{
		RootsV2:     &mcp.RootCapabilities{ListChanged: true},
		Sampling:    &mcp.SamplingCapabilities{},
		Elicitation: &mcp.ElicitationCapabilities{Form: &mcp.FormElicitationCapabilities{}},
	}
}

// syncRoots makes client's roots those of cfg; go-sdk tells connected
// servers with notifications/roots/list_changed when they change.
func syncRoots(client *mcp.Client, old, cfg []model.Root) {
	keep := map[string]bool{}
	for _, r := range cfg {
		keep[r.URI] = true
	}
	var gone []string
	for _, r := range old {
		if !keep[r.URI] {
			gone = append(gone, r.URI)
		}
	}
	if len(gone) > 0 {
		client.RemoveRoots(gone...)
	}
	roots := make([]*mcp.Root, 0, len(cfg))
	for _, r := range cfg {
		roots = append(roots, &mcp.Root{URI: r.URI, Name: r.Name})
	}
	client.AddRoots(roots...)
}
