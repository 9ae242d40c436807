package bus

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// In-process hand-off. When a requester and the service that would answer
// it share a process and a NATS server (mcpbus up: the gateway and the
// runner), RequestLocal gives the request to the service's endpoint handler
// directly: the same handler, wrapped as StartService wraps it (reply and
// queue-group checks), with the same headers (trace, request id, deadline,
// principal) and an inbox of the requester's connection as its reply
// subject, so what the handler checks and does is what it would for the
// bus request. Only the two NATS hops (publish, deliver, reply) are skipped.

// localEntry is one endpoint served in this process.
type localEntry struct {
	nc *nats.Conn
	h  micro.Handler
}

var (
	localMu sync.RWMutex
	// locals holds the endpoints with Local set, by their subject (a literal
	// prefix and ".*"); several when tests run several buses.
	locals = map[string][]*localEntry{}
)

// serveLocal registers h for the requests on subject reachable through nc's
// server; the returned function unregisters it. Only subjects "<literal>.*"
// qualify (a server's call endpoint); others are left to the bus.
func serveLocal(nc *nats.Conn, subject string, h micro.Handler) func() {
	if !strings.HasSuffix(subject, ".*") || strings.ContainsAny(strings.TrimSuffix(subject, "*"), "*>") {
		return func() {}
	}
	e := &localEntry{nc: nc, h: h}
	localMu.Lock()
	locals[subject] = append(locals[subject], e)
	localMu.Unlock()
	return func() {
		localMu.Lock()
		defer localMu.Unlock()
		rest := slices.DeleteFunc(locals[subject], func(x *localEntry) bool { return x == e })
		if len(rest) == 0 {
			delete(locals, subject)
			return
		}
		locals[subject] = rest
	}
}

// localFor is the handler in this process that the bus would hand subject
// to from nc, if any: one registered for the subject's "<prefix>.*" by a
// connection to the same server as nc, both connected.
func localFor(nc *nats.Conn, subject string) micro.Handler {
	i := strings.LastIndexByte(subject, '.')
	if i < 0 {
		return nil
	}
	key := subject[:i+1] + "*"
	localMu.RLock()
	defer localMu.RUnlock()
	for _, e := range locals[key] {
		if e.nc.IsConnected() && nc.IsConnected() && e.nc.ConnectedServerId() == nc.ConnectedServerId() {
			return e.h
		}
	}
	return nil
}

// localRequests counts the requests handed over in process.
var localRequests atomic.Uint64

// LocalRequests is how many requests RequestLocal handed to a service in
// this process (tests tell the two paths apart by it).
func LocalRequests() uint64 { return localRequests.Load() }

// HasLocal reports whether a request on subject from nc would be served in
// this process (RequestLocal).
func HasLocal(nc *nats.Conn, subject string) bool { return localFor(nc, subject) != nil }

// RequestLocal is Request for a service in this process: when one serves
// msg.Subject for nc's server (an Endpoint with Local), its handler answers
// msg and ok is true; otherwise ok is false and nothing was sent (use
// Request). mayPublish must say whether nc's identity may publish
// msg.Subject: the NATS server checks that on the bus, so a request it would
// refuse is refused here too (UNAUTHORIZED, at once).
func RequestLocal(ctx context.Context, nc *nats.Conn, msg *nats.Msg, timeout time.Duration, mayPublish func(string) bool) (reply *nats.Msg, ok bool, err error) {
	h := localFor(nc, msg.Subject)
	if h == nil {
		return nil, false, nil
	}
	ctx, cancel := bounded(ctx, timeout)
	defer cancel()
	start := time.Now()
	ctx, span, tmpl, in := sendSpan(ctx, msg)
	reply, err = requestLocal(ctx, nc, h, msg, mayPublish)
	endSend(ctx, in, span, tmpl, start, err)
	return reply, true, err
}

func requestLocal(ctx context.Context, nc *nats.Conn, h micro.Handler, msg *nats.Msg, mayPublish func(string) bool) (*nats.Msg, error) {
	if !mayPublish(msg.Subject) {
		// The server would drop it and the request wait out its deadline:
		// refused at once instead.
		return nil, apierr.New(apierr.Unauthorized, "this identity may not publish "+msg.Subject)
	}
	PrepareHeaders(ctx, msg)
	localRequests.Add(1)
	// The handler may outlive this call (a timed-out request runs on until
	// cancelled): it gets copies the caller can reuse.
	req := &localRequest{ctx: ctx, subject: msg.Subject, reply: nc.NewRespInbox(), data: slices.Clone(msg.Data),
		headers: micro.Headers(maps.Clone(msg.Header)), out: make(chan *nats.Msg, 1)}
	req.vouched, req.hasVouch = ctx.Value(vouchKey{}).([sha256.Size]byte)
	h.Handle(req)
	select {
	case reply := <-req.out:
		if e := ReplyError(reply); e != nil {
			return nil, e
		}
		return reply, nil
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, apierr.Wrap(apierr.Network, "no reply on "+msg.Subject+" before the deadline", ctx.Err())
		}
		return nil, FromNATS(ctx.Err(), msg.Subject)
	}
}

// localRequest is a micro.Request delivered in process; its first response
// is the reply (a second is dropped, as the bus drops one to a reply inbox
// whose request already has its answer).
type localRequest struct {
	// ctx is the requester's: done when it gives up (RequesterContext).
	ctx            context.Context
	subject, reply string
	data           []byte
	headers        micro.Headers
	once           sync.Once
	out            chan *nats.Msg
	// vouched is the schema digest of VouchArguments, when hasVouch.
	vouched  [sha256.Size]byte
	hasVouch bool
}

// vouchKey carries VouchArguments' digest in a requester's context.
type vouchKey struct{}

// VouchArguments says, to a service in this process, that the arguments of
// the request made with ctx were checked against the input schema whose
// SHA-256 is digest (its JSON as the tool's catalog entry holds it), so the
// service need not check them against that same schema again. Only
// RequestLocal carries it: a context does not cross the bus, and nothing a
// message says can claim it.
func VouchArguments(ctx context.Context, digest [sha256.Size]byte) context.Context {
	return context.WithValue(ctx, vouchKey{}, digest)
}

// Vouched is the digest a requester in this process gave VouchArguments
// for req; ok is false for every request that came over the bus.
func Vouched(req micro.Request) (digest [sha256.Size]byte, ok bool) {
	if l := localOf(req); l != nil {
		return l.vouched, l.hasVouch
	}
	return digest, false
}

// localOf is the request RequestLocal handed over under req (the endpoint's
// queue-group wrapper taken off), or nil for a request from the bus.
func localOf(req micro.Request) *localRequest {
	if g, wrapped := req.(groupRequest); wrapped {
		req = g.Request
	}
	l, _ := req.(*localRequest)
	return l
}

// RequesterContext is, for a request RequestLocal handed over, the
// requester's context (done when the requester gives up, at its deadline or
// cancelled); ok is false for every request that came over the bus. A
// handler may run such a request on the requester's goroutine (it waits for
// the reply anyway) as long as it ends when this context does: the
// requester cannot return before the handler does then.
func RequesterContext(req micro.Request) (ctx context.Context, ok bool) {
	if l := localOf(req); l != nil {
		return l.ctx, true
	}
	return nil, false
}

var _ micro.Request = (*localRequest)(nil)

func (r *localRequest) Data() []byte           { return r.data }
func (r *localRequest) Headers() micro.Headers { return r.headers }
func (r *localRequest) Subject() string        { return r.subject }
func (r *localRequest) Reply() string          { return r.reply }

func (r *localRequest) send(m *nats.Msg) {
	r.once.Do(func() { r.out <- m })
}

// Respond is micro's Respond: the data with the options' headers.
func (r *localRequest) Respond(data []byte, opts ...micro.RespondOpt) error {
	m := &nats.Msg{Subject: r.reply, Data: data}
	for _, o := range opts {
		o(m)
	}
	r.send(m)
	return nil
}

// RespondJSON is micro's RespondJSON.
func (r *localRequest) RespondJSON(v any, opts ...micro.RespondOpt) error {
	data, err := json.Marshal(v)
	if err != nil {
		return micro.ErrMarshalResponse
	}
	return r.Respond(data, opts...)
}

// Error is micro's Error: the code and description in its headers.
func (r *localRequest) Error(code, description string, data []byte, opts ...micro.RespondOpt) error {
	if code == "" || description == "" {
		return micro.ErrArgRequired
	}
	m := &nats.Msg{Subject: r.reply, Header: nats.Header{micro.ErrorHeader: {description}, micro.ErrorCodeHeader: {code}}}
	for _, o := range opts {
		o(m)
	}
	m.Data = data
	r.send(m)
	return nil
}
