package mcpserver

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/client"
)

// The call fast path. A tools/call is most of an agent's traffic, and on a
// stateful session go-sdk's Streamable HTTP server spends more CPU on it than
// the bus hop and the runner together: a logical stream per POST, the
// session's JSON-RPC connection with its goroutine hand-offs, the result
// decoded into a CallToolResult and encoded again. A call that needs none of
// that (no progress token, a live initialized session of this principal, a
// protocol version without per-request metadata) is answered here instead:
// decoded and encoded with go-sdk's jsonrpc package, the arguments checked
// against the same schema, the runner's result passed through as raw JSON in
// one application/json response, which Streamable HTTP allows for any POST.
// Anything else, and anything in doubt, goes to go-sdk unchanged, which
// answers it (or refuses it) as before.
//
// Because such calls never reach go-sdk's session, its idle timer would not
// see them: the aggregate keeps the sessions' idle time itself (sessionTable)
// and go-sdk's own timeout is off.

// liveSession is a go-sdk session the gateway has seen a request for.
type liveSession struct {
	ss       *mcp.ServerSession
	lastUsed atomic.Int64
	// inflight holds the cancel functions of fast-path calls by JSON-RPC id,
	// for notifications/cancelled.
	inflight sync.Map
}

// sessionTable tracks the live stateful sessions by id.
type sessionTable struct {
	mu   sync.Mutex
	byID map[string]*liveSession
}

// lookup returns the live session sid of v, finding it among go-sdk's
// sessions on first sight (and forgetting it once go-sdk closes it); nil when
// v has no such session.
func (t *sessionTable) lookup(v *view, sid string) *liveSession {
	t.mu.Lock()
	ls, ok := t.byID[sid]
	t.mu.Unlock()
	if ok {
		return ls
	}
	for ss := range v.server.Sessions() {
		if ss.ID() == sid {
			return t.track(ss)
		}
	}
	return nil
}

// track adds ss, once; it is dropped when the session ends.
func (t *sessionTable) track(ss *mcp.ServerSession) *liveSession {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ls, ok := t.byID[ss.ID()]; ok {
		return ls
	}
	ls := &liveSession{ss: ss}
	ls.lastUsed.Store(time.Now().UnixNano())
	if t.byID == nil {
		t.byID = map[string]*liveSession{}
	}
	t.byID[ss.ID()] = ls
	go func() {
		_ = ss.Wait()
		t.mu.Lock()
		if t.byID[ss.ID()] == ls {
			delete(t.byID, ss.ID())
		}
		t.mu.Unlock()
	}()
	return ls
}

// closeIdle closes the sessions of views unused since cutoff, tracking first
// those never seen since their initialize.
func (t *sessionTable) closeIdle(views []*view, cutoff time.Time) {
	for _, v := range views {
		for ss := range v.server.Sessions() {
			t.track(ss)
		}
	}
	t.mu.Lock()
	var idle []*liveSession
	for _, ls := range t.byID {
		if ls.lastUsed.Load() < cutoff.UnixNano() {
			idle = append(idle, ls)
		}
	}
	t.mu.Unlock()
	for _, ls := range idle {
		_ = ls.ss.Close()
	}
}

// fastCallParams is what the fast path needs of tools/call params.
type fastCallParams struct {
	Name      string                     `json:"name"`
	Arguments json.RawMessage            `json:"arguments,omitempty"`
	Meta      map[string]json.RawMessage `json:"_meta,omitempty"`
}

// cancelledParams is what the fast path needs of notifications/cancelled.
type cancelledParams struct {
	RequestID any `json:"requestId"`
}

// fastPath answers msg itself when it can and reports whether it did; ls is
// the request's live session (nil: none).
func (a *Aggregator) fastPath(w http.ResponseWriter, r *http.Request, v *view, ls *liveSession, msg jsonrpc.Message) bool {
	req, ok := msg.(*jsonrpc.Request)
	if !ok || ls == nil || !eligible(r) {
		return false
	}
	if !req.IsCall() {
		if req.Method == "notifications/cancelled" {
			a.cancelFast(ls, req) // go-sdk still gets it (and answers 202)
		}
		return false
	}
	if req.Method != "tools/call" || ls.ss.InitializeParams() == nil {
		return false
	}
	var p fastCallParams
	if err := json.Unmarshal(req.Params, &p); err != nil || p.Name == "" {
		return false
	}
	if _, ok := p.Meta["progressToken"]; ok {
		return false // progress streams: go-sdk's SSE response
	}
	a.mu.Lock()
	e := v.installed[p.Name]
	a.mu.Unlock()
	if e == nil {
		return false // go-sdk answers unknown tools
	}
	idKey := idString(req.ID)
	if _, busy := ls.inflight.Load(idKey); busy {
		return false // go-sdk refuses a duplicate in-flight id
	}

	args, bad := checkArguments(e, p.Arguments)
	if bad != nil {
		writeRPC(w, &jsonrpc.Response{ID: req.ID, Error: rpcError(jsonrpc.CodeInvalidParams, bad)})
		return true
	}
	meta := mcp.Meta{}
	for _, k := range []string{"traceparent", "tracestate", "baggage"} {
		var s string
		if raw, ok := p.Meta[k]; ok && json.Unmarshal(raw, &s) == nil {
			meta[k] = s
		}
	}
	ctx := traceContext(r.Context(), &mcp.RequestExtra{Header: r.Header}, meta)
	ctx, cancel := context.WithTimeout(ctx, a.opts.CallTimeout)
	defer cancel()
	ls.inflight.Store(idKey, cancel)
	defer ls.inflight.Delete(idKey)

	raw, err := a.client.Call(ctx, e.cat.Server, e.cat.Tool, args, &client.CallOptions{})
	if err != nil {
		if r.Context().Err() != nil {
			return true // the client hung up: nobody to answer
		}
		writeRPC(w, &jsonrpc.Response{ID: req.ID, Error: errorOf(a.callError(ctx, e, err))})
		return true
	}
	if len(raw) == 0 || raw[0] != '{' {
		a.log.Warn("tool result is not a CallToolResult", "tool", e.name)
		writeRPC(w, &jsonrpc.Response{ID: req.ID, Error: rpcError(jsonrpc.CodeInternalError, apierr.Newf(apierr.Internal, "tool %s returned a result that is not a CallToolResult", e.name))})
		return true
	}
	writeRPC(w, &jsonrpc.Response{ID: req.ID, Result: json.RawMessage(raw)})
	return true
}

// eligible says whether the HTTP side of r is one go-sdk would serve without
// objection and without per-request protocol metadata: anything else goes
// to go-sdk, which gives the answer of the spec.
func eligible(r *http.Request) bool {
	pv := r.Header.Get("Mcp-Protocol-Version")
	if pv == "" || pv >= "2026-07-28" || !supportedVersion[pv] {
		return false
	}
	if !strings.EqualFold(strings.TrimSpace(strings.Split(r.Header.Get("Content-Type"), ";")[0]), "application/json") {
		return false
	}
	if !acceptsBoth(r.Header.Values("Accept")) {
		return false
	}
	// go-sdk's DNS-rebinding guard: a loopback listener reached by a foreign Host.
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && la != nil && isLoopback(la.String()) && !isLoopback(r.Host) {
		return false
	}
	return true
}

// supportedVersion are the stateful protocol versions of go-sdk v1.8.0.
var supportedVersion = map[string]bool{"2025-11-25": true, "2025-06-18": true, "2025-03-26": true, "2024-11-05": true}

// acceptsBoth is go-sdk's rule: a POST must accept JSON and an event stream.
func acceptsBoth(values []string) bool {
	var j, s bool
	for _, v := range values {
		for _, tok := range strings.Split(v, ",") {
			base, _, _ := strings.Cut(tok, ";")
			switch strings.ToLower(strings.TrimSpace(base)) {
			case "application/json", "application/*":
				j = true
			case "text/event-stream", "text/*":
				s = true
			case "*/*":
				j, s = true, true
			}
		}
	}
	return j && s
}

func isLoopback(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// cancelFast cancels the fast-path call a notifications/cancelled names.
func (a *Aggregator) cancelFast(ls *liveSession, req *jsonrpc.Request) {
	var p cancelledParams
	if json.Unmarshal(req.Params, &p) != nil || p.RequestID == nil {
		return
	}
	id, err := jsonrpc.MakeID(p.RequestID)
	if err != nil {
		return
	}
	if c, ok := ls.inflight.Load(idString(id)); ok {
		c.(context.CancelFunc)()
	}
}

// idString keys a JSON-RPC id: numbers and strings never collide.
func idString(id jsonrpc.ID) string {
	switch v := id.Raw().(type) {
	case string:
		return "s" + v
	case int64:
		return "n" + strconv.FormatInt(v, 10)
	}
	return ""
}

// errorOf is the JSON-RPC error of a tool handler's error.
func errorOf(err error) *jsonrpc.Error {
	if je, ok := err.(*jsonrpc.Error); ok {
		return je
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
}

// writeRPC writes one JSON-RPC response as the POST's application/json body.
func writeRPC(w http.ResponseWriter, resp *jsonrpc.Response) {
	data, err := jsonrpc.EncodeMessage(resp)
	if err != nil {
		http.Error(w, "encoding the response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache, no-transform")
	_, _ = w.Write(data)
}
