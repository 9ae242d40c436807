//lint:file-ignore SA1019 sampling and roots are deprecated by protocol 2026-07-28 (SEP-2577) but work for at least twelve months, and servers of older protocols use them: mcpbus relays them.

package runner

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/deadline"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/schemaguard"
	"github.com/mcpbus/mcpbus/libs/secretscan"
)

// clientTarget is where the requests an MCP server makes of its client
// during one call go: the subject the caller named in Mcp-Client-Subject.
type clientTarget struct {
	subject   string
	requestID string
	// principal is who the call is for (callerPrincipal): a request that
	// may be a late one of another principal's call never reaches it.
	principal string
	// limit is the call's context: its time limit stops while the caller
	// answers a request for input.
	limit context.Context
	// inFlight and made count the server's requests of this call (relay):
	// each holds goroutines, a subscription and, for input, a person's
	// attention, so a server may have only so many.
	inFlight, made atomic.Int32
	// span is the runner's tools/call span of the call, set once the call
	// starts (setSpan): the parent of the relays of the requests a server
	// of an older protocol sends on its session, whose context is not the
	// call's (it carries the span of the server's start, another trace).
	span atomic.Pointer[trace.SpanContext]
}

// setSpan records the call's tools/call span (span).
func (t *clientTarget) setSpan(sc trace.SpanContext) { t.span.Store(&sc) }

// callTrace is ctx, a request's on the server's session, with the trace of
// t's call in place of the session's: the relay's span belongs under the
// call it serves. Without a recorded span (tracing off), ctx has none.
func (t *clientTarget) callTrace(ctx context.Context) context.Context {
	var sc trace.SpanContext
	if p := t.span.Load(); p != nil {
		sc = *p
	}
	return trace.ContextWithSpanContext(ctx, sc)
}

// A call's server-to-client requests: at most maxClientRequestsInFlight at
// once, maxClientRequests in all; past them a request is refused (a JSON-RPC
// error to the server), the call goes on.
const (
	maxClientRequestsInFlight = 4
	maxClientRequests         = 256
)

type clientTargetKey struct{}

func withClientTarget(ctx context.Context, t *clientTarget) context.Context {
	return context.WithValue(ctx, clientTargetKey{}, t)
}

// clientTargets are the operations (calls, rpcs) of one server in flight,
// by session, with the client subject each named (nil: none), for servers
// whose requests arrive without the operation's context; and the
// principals whose operation on a session ended unanswered (inDoubt).
type clientTargets struct {
	mu        sync.Mutex
	bySession map[*mcp.ClientSession]sessionOps // by value: a call allocates nothing here
	// doubt holds, by session, the principals whose operation ended before
	// the server answered it, and until when a request on that session may
	// still be that operation's. Entries go when they pass (prune).
	doubt map[*mcp.ClientSession]map[string]time.Time
}

// sessionOps are one session's operations in flight.
type sessionOps struct {
	n       int
	targets map[*clientTarget]struct{}
}

// inDoubt is how an operation ended, for leave: the zero value when the
// server answered it (or the session is gone). One that ended without the
// server's answer (cancelled, timed out, its caller gone) leaves the
// server perhaps still working on it, and free to send requests for it
// that name no call: until is how long the runner assumes so.
type inDoubt struct {
	principal string
	until     time.Time
}

// unanswered is the inDoubt of an operation of principal whose context is
// ctx, as it leaves: in doubt for bound from now when ctx ended (the
// operation was given up; a reply that raced the end makes it in doubt
// needlessly, which only refuses more), none otherwise.
func unanswered(ctx context.Context, principal string, bound time.Duration) inDoubt {
	if ctx.Err() == nil {
		return inDoubt{}
	}
	return inDoubt{principal: principal, until: time.Now().Add(bound)}
}

// enter records an operation in flight on sess (t nil: it named no client
// subject); leave, with the same sess and t, ends it.
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

// leave ends an operation; d, when set, records that it ended unanswered
// in the same step, so that no request finds it gone but not yet in doubt.
func (c *clientTargets) leave(sess *mcp.ClientSession, t *clientTarget, d inDoubt) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !d.until.IsZero() {
		c.pruneLocked(time.Now())
		if c.doubt == nil {
			c.doubt = map[*mcp.ClientSession]map[string]time.Time{}
		}
		byPrincipal := c.doubt[sess]
		if byPrincipal == nil {
			byPrincipal = map[string]time.Time{}
			c.doubt[sess] = byPrincipal
		}
		if d.until.After(byPrincipal[d.principal]) {
			byPrincipal[d.principal] = d.until
		}
	}
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

// pruneLocked drops the doubts that have passed, of every session: a
// session that stopped has its own go with them.
func (c *clientTargets) pruneLocked(now time.Time) {
	for sess, byPrincipal := range c.doubt {
		for p, until := range byPrincipal {
			if !now.Before(until) {
				delete(byPrincipal, p)
			}
		}
		if len(byPrincipal) == 0 {
			delete(c.doubt, sess)
		}
	}
}

// only is the client subject of the one operation in flight on sess, or nil
// when there are none or several, or it named none, or (late set) another
// principal's operation on sess ended unanswered within its bound: the
// request may be that one's.
func (c *clientTargets) only(sess *mcp.ClientSession) (t *clientTarget, late bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ops := c.bySession[sess]
	if ops.n != 1 {
		return nil, false
	}
	for k := range ops.targets {
		t = k
	}
	if t == nil {
		return nil, false
	}
	now := time.Now()
	for p, until := range c.doubt[sess] {
		if p != t.principal && now.Before(until) {
			return nil, true
		}
	}
	return t, false
}

// Why the runner refused a server's request (the reason attribute of
// mcpbus.runner.client_requests.refused).
const (
	refusedNoCaller = "no_caller" // no call, several, or one without a client subject
	refusedInDoubt  = "in_doubt"  // another principal's call ended unanswered within its bound
	refusedLimit    = "limit"     // the call's requests past maxClientRequests(InFlight)
)

// targetFor picks the caller a server's request on sess goes to. go-sdk
// fulfils the input requests of a multi round-trip result (protocol
// 2026-07-28) under the call's own context, which names its caller. A
// request sent on an older session carries nothing that says which
// operation it serves: it goes to the caller of the only operation in
// flight on that session, when that one named a client subject, and to
// nobody otherwise. With several in flight (a shared session serves every
// caller), one caller must never see, or answer, another's request. Nor
// after another's call ended unanswered: a server may go on with a call
// that was cancelled or timed out and ask for it later, when the next
// caller's call is the only one, so for a while (inDoubt) only a call of
// the same principal may get such a request.
func (s *server) targetFor(ctx context.Context, sess *mcp.ClientSession, method string) (*clientTarget, error) {
	if t, ok := ctx.Value(clientTargetKey{}).(*clientTarget); ok {
		return t, nil
	}
	t, late := s.clients.only(sess)
	if t != nil {
		return t, nil
	}
	if late {
		s.countRefusedRequest(refusedInDoubt)
		s.log.Warn("refused a server's request: a call of another principal on this session ended before the server answered it, and the request may be that call's", "method", method)
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest,
			Message: "mcpbus: no caller to relay " + method + " to (a call on this session ended before it was answered, and the request may be that call's)"}
	}
	s.countRefusedRequest(refusedNoCaller)
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
	if own, _ := ctx.Value(clientTargetKey{}).(*clientTarget); own != t {
		ctx = t.callTrace(ctx) // the session's context: the call's trace instead
	}
	if t.made.Add(1) > maxClientRequests {
		s.countRefusedRequest(refusedLimit)
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: fmt.Sprintf("mcpbus: this call has made %d requests of its client already; no more are relayed", maxClientRequests)}
	}
	if t.inFlight.Add(1) > maxClientRequestsInFlight {
		t.inFlight.Add(-1)
		s.countRefusedRequest(refusedLimit)
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: fmt.Sprintf("mcpbus: %d requests of this call to its client are in flight already; wait for their answers", maxClientRequestsInFlight)}
	}
	defer t.inFlight.Add(-1)
	body, err := json.Marshal(params)
	if err != nil {
		return apierr.Wrap(apierr.Internal, "encoding "+method, err)
	}
	// What the server asks reaches the caller and its model as a result
	// does; the answer reaches the server as arguments do.
	policy := s.secretPolicy()
	body, found, action := s.r.secrets.checkRelayed(policy.ResultsPolicy(), body, relayedBinary(method, body, false))
	s.logRelayed(method, "request", action, found, t.requestID)
	if body == nil {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf(
			"mcpbus: the %s request carried a secret (rule %s): it was not relayed (policy secret_scan.results)", method, strings.Join(secretscan.Rules(found), ", "))}
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
	// Bounded by wait whatever ctx is, and ended with the call (an older
	// session's request comes on the session's context, not the call's) or
	// the session's stop.
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if t.limit != nil {
		defer context.AfterFunc(t.limit, cancel)()
	}
	defer context.AfterFunc(s.relays.of(sess), cancel)()
	// Answered into a subject of its own: an agent may write there, and
	// nowhere else of the runner's inbox.
	reply, err := bus.RequestAnswer(ctx, s.r.nc, msg, wait)
	if err != nil {
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "mcpbus: the caller did not answer " + method + ": " + apierr.From(err).Message}
	}
	answer, found, action := s.r.secrets.checkRelayed(policy.ArgumentsPolicy(), reply.Data, relayedBinary(method, reply.Data, true))
	s.logRelayed(method, "answer", action, found, t.requestID)
	if answer == nil && len(found) > 0 {
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf(
			"mcpbus: the caller's answer to %s carried a secret (rule %s): it was withheld (policy secret_scan.arguments)", method, strings.Join(secretscan.Rules(found), ", "))}
	}
	if err := json.Unmarshal(answer, out); err != nil {
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "mcpbus: the caller's answer to " + method + " is not a result: " + err.Error()}
	}
	return nil
}

// logRelayed logs what checkRelayed found in a relayed request or answer:
// the rule and the place, never the value.
func (s *server) logRelayed(method, where, action string, found []secretscan.Finding, requestID string) {
	for _, rule := range secretscan.Rules(found) {
		s.log.Warn("secret found in a server's request to its caller", "method", method, "where", where, "rule", rule, "action", action, "request_id", requestID)
	}
}

// relayGroups end the relays of a session that stops (stopSession).
type relayGroups struct {
	mu     sync.Mutex
	bySess map[*mcp.ClientSession]relayGroup
}

type relayGroup struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// of is the context that ends with sess's stop.
func (g *relayGroups) of(sess *mcp.ClientSession) context.Context {
	g.mu.Lock()
	defer g.mu.Unlock()
	if r, ok := g.bySess[sess]; ok {
		return r.ctx
	}
	if g.bySess == nil {
		g.bySess = map[*mcp.ClientSession]relayGroup{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	g.bySess[sess] = relayGroup{ctx, cancel}
	return ctx
}

// end ends sess's relays in flight.
func (g *relayGroups) end(sess *mcp.ClientSession) {
	g.mu.Lock()
	r, ok := g.bySess[sess]
	delete(g.bySess, sess)
	g.mu.Unlock()
	if ok {
		r.cancel()
	}
}

func (s *server) onElicit(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	// The runner offers form elicitation alone (clientCapabilities). A URL
	// would reach callers as if mcpbus asked, and the gateway's own
	// authorization prompt is a URL-mode elicitation a server could mimic.
	if req.Params != nil && (req.Params.Mode != "" && req.Params.Mode != "form" || req.Params.URL != "") {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "mcpbus: only form elicitation is relayed (the client did not declare url elicitation)"}
	}
	// The caller's answer is checked against the server's schema (by go-sdk
	// here, by the gateway's session): one whose refs loop would recurse in
	// that check until the stack overflows, so it never reaches a caller.
	if req.Params != nil && req.Params.RequestedSchema != nil {
		raw, err := json.Marshal(req.Params.RequestedSchema)
		if err == nil {
			err = schemaguard.CheckForm(raw)
		}
		if err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "mcpbus: the requested schema is refused: " + err.Error()}
		}
	}
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
