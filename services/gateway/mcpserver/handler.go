package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
)

// viewCtxKey carries the request's view from Handler to getServer, through
// go-sdk's StreamableHTTPHandler.
type viewCtxKey struct{}

// Handler is the Streamable HTTP endpoint. Each request's principal
// (auth.PrincipalFrom) chooses the tools it sees.
func (a *Aggregator) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		markSpan(r)
		dw := newDeadlineWriter(w, a.opts.StreamWriteTimeout)
		defer dw.arm()
		w = dw
		p := auth.PrincipalFrom(r.Context())
		if p == nil {
			if !a.opts.NoAuth {
				writeError(w, apierr.New(apierr.Unauthorized, "an API key is required"))
				return
			}
			p = auth.Anonymous()
		}
		if !p.Can(auth.ScopeCall) {
			auth.WriteError(w, http.StatusForbidden, apierr.New(apierr.Unauthorized, "this API key may not list or call tools (scope call)"))
			return
		}
		search, err := searchMode(r)
		if err != nil {
			writeError(w, apierr.From(err))
			return
		}
		v, err := a.viewFor(p, search || p.SearchMode())
		if err != nil {
			writeError(w, apierr.From(err))
			return
		}
		var msg jsonrpc.Message
		if r.Method == http.MethodPost {
			var ok bool
			if msg, ok = precheck(w, r); !ok {
				return
			}
		}
		if r.Method == http.MethodPost && refuseVersion(w, r, msg) {
			return
		}
		release, ok := a.takeListen(w, p, msg)
		if !ok {
			return
		}
		defer release()
		if a.opts.Stateless || modernRequest(r, msg) {
			a.serveModern(w, r, v, msg)
			return
		}
		a.serveSession(w, r, v, msg)
	})
}

// serveModern answers a request of protocol 2026-07-28 (SEP-2575: no
// session, the POST is the whole request), or any request with --stateless:
// go-sdk's stateless handler, after the call fast path.
func (a *Aggregator) serveModern(w http.ResponseWriter, r *http.Request, v *view, msg jsonrpc.Message) {
	modern := modernRequest(r, msg)
	if modern && r.Header.Get("Last-Event-ID") != "" {
		// 2026-07-28 streams are not resumable and the spec has a server
		// ignore the header (go-sdk refuses a POST with it, and the fast
		// path leaves resumptions to go-sdk).
		r.Header.Del("Last-Event-ID")
	}
	if req := unknownMethod(r, msg); req != nil && !modern {
		// An older client on a --stateless gateway: go-sdk would refuse it
		// in plain text.
		writeRPC(w, http.StatusOK, &jsonrpc.Response{ID: req.ID, Error: methodNotFound(req.Method)})
		return
	}
	if msg != nil && a.taskPath(w, r, v, nil, modern, msg) {
		return
	}
	if msg != nil && !a.opts.NoFastPath && a.fastPath(w, r, v, nil, msg) {
		return
	}
	a.awaitCalled(r.Context(), v, msg)
	a.stateless.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), viewCtxKey{}, v)))
}

// serveSession answers a request of the initialize era (up to 2025-11-25):
// go-sdk's stateful handler, after the call fast path.
func (a *Aggregator) serveSession(w http.ResponseWriter, r *http.Request, v *view, msg jsonrpc.Message) {
	var ls *liveSession
	if sid := r.Header.Get("Mcp-Session-Id"); sid != "" {
		// A session belongs to the key (and filter) that opened it; to
		// anyone else it does not exist, which tells a client to start a
		// new one.
		if !v.owns(sid) {
			http.Error(w, "session not found", http.StatusNotFound)
			return
		}
		var done func()
		ls, done = a.sessions.enter(v, sid, r.Method)
		defer done()
	} else if req, ok := msg.(*jsonrpc.Request); ok && req.Method == "initialize" {
		if !a.sessions.makeRoom(v, a.opts.MaxSessions) {
			writeError(w, apierr.Newf(apierr.RateLimited, "%d sessions of this key are open and busy; close one (DELETE) or wait", a.opts.MaxSessions))
			return
		}
	} else if ok && req.IsCall() && !sessionless[req.Method] {
		// go-sdk would open a session for it and answer error code 0.
		writeRPCError(w, req.ID, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest,
			Message: fmt.Sprintf("Bad Request: %s before initialize: send initialize first and then the Mcp-Session-Id it returns", req.Method)})
		return
	}
	req, _ := msg.(*jsonrpc.Request)
	if ls != nil && req != nil && req.IsCall() && req.Method == "initialize" {
		// go-sdk would answer error code 0 ("duplicate initialize").
		writeRPCError(w, req.ID, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest,
			Message: "Bad Request: initialize on a session that is initialized already: send initialize without Mcp-Session-Id to open another"})
		return
	}
	if ls != nil && unknownMethod(r, msg) != nil {
		// A well-formed request for a method the gateway does not serve: a
		// JSON-RPC error in a 200 answer, as for any other failed request
		// (HTTP 400 would be a transport error to clients). Without a live
		// session, the checks above and go-sdk's 404 come first.
		writeRPC(w, http.StatusOK, &jsonrpc.Response{ID: req.ID, Error: methodNotFound(req.Method)})
		return
	}
	if ls != nil && req != nil && req.Method == "notifications/cancelled" {
		a.cancelFast(ls, req) // go-sdk still gets it (and answers 202)
	}
	if ls != nil && msg != nil && a.taskPath(w, r, v, ls, false, msg) {
		return
	}
	if msg != nil && !a.opts.NoFastPath && a.fastPath(w, r, v, ls, msg) {
		return
	}
	if ls != nil && r.Method == http.MethodGet {
		// The GET stream also carries the gateway's own notifications.
		var detach func()
		w, detach = ls.push.attach(w)
		defer detach()
	}
	if ls != nil && req != nil && req.IsCall() {
		var done func()
		w, done = ls.watchCancel(w, req)
		defer done()
	}
	a.awaitCalled(r.Context(), v, msg)
	a.http.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), viewCtxKey{}, v)))
}

// sessionless are the requests an initialize-era client may send without a
// session.
var sessionless = map[string]bool{"initialize": true, "ping": true}

// getServer is go-sdk's choice of server for a request: the view Handler put
// in its context.
func (a *Aggregator) getServer(r *http.Request) *mcp.Server {
	if v, ok := r.Context().Value(viewCtxKey{}).(*view); ok {
		return v.server
	}
	return nil
}

// serverMethods are the requests an MCP server receives (go-sdk v1.8.0),
// less logging/setLevel: the gateway relays no server's log messages, so it
// declares no logging capability and has no level to set (methodNotFound).
var serverMethods = map[string]bool{
	"initialize": true, "ping": true, "server/discover": true, "subscriptions/listen": true,
	"tools/list": true, "tools/call": true, "prompts/list": true, "prompts/get": true,
	"resources/list": true, "resources/templates/list": true, "resources/read": true,
	"resources/subscribe": true, "resources/unsubscribe": true,
	"completion/complete": true,
}

// unknownMethod is msg when it is a request of the initialize era (by its
// MCP-Protocol-Version header) for a method the gateway does not serve, which
// go-sdk would refuse in plain text with HTTP 400. Requests of protocol
// 2026-07-28 get -32601 from go-sdk itself, with HTTP 404 as SEP-2575 says.
func unknownMethod(r *http.Request, msg jsonrpc.Message) *jsonrpc.Request {
	req, ok := msg.(*jsonrpc.Request)
	if !ok || !req.IsCall() || serverMethods[req.Method] || taskMethods[req.Method] || r.Header.Get("Mcp-Protocol-Version") >= modernVersion {
		return nil
	}
	return req
}

// methodNotFound is the error for a request of a method the gateway does
// not serve, on every transport.
func methodNotFound(method string) *jsonrpc.Error {
	msg := fmt.Sprintf("Method not found: %q", method)
	if method == "logging/setLevel" {
		msg += ": the gateway relays no server's log messages (it has no logging capability)"
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: msg}
}

// precheck answers a body that is not JSON, which go-sdk refuses in plain
// text, with the JSON-RPC error of the spec instead (-32700, no id), still
// with HTTP 400 (Streamable HTTP lets the body of a refused POST be a
// JSON-RPC error); bodies over its size limit are left for it to refuse.
//
// It returns the decoded message (nil when the body is not one JSON-RPC
// message) for the choice of protocol and the call fast path, with the body
// left readable for go-sdk.
func precheck(w http.ResponseWriter, r *http.Request) (jsonrpc.Message, bool) {
	if r.Body == nil {
		return nil, true
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, mcp.DefaultMaxRequestBodyBytes+1))
	if err != nil {
		writeError(w, apierr.Wrap(apierr.Validation, "reading the request body: "+err.Error(), err))
		return nil, false
	}
	r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), r.Body))
	if len(body) > mcp.DefaultMaxRequestBodyBytes {
		return nil, true
	}
	notJSON := func() bool {
		if json.Valid(body) {
			return false
		}
		writeRPCError(w, jsonrpc.ID{}, &jsonrpc.Error{Code: jsonrpc.CodeParseError, Message: "Parse error: the body is not valid JSON"})
		return true
	}
	// Decoding fails on bad JSON too: the separate scan is only needed then.
	msg, err := decodeMessage(body)
	if err != nil {
		if notJSON() {
			return nil, false
		}
		if t := bytes.TrimLeft(body, " \t\r\n"); len(t) > 0 && t[0] == '[' {
			// A batch (MCP before 2025-06-18): every check here reads one
			// message a POST (the sessions' cap on initialize, the listen
			// streams', the fast path's), and go-sdk would serve the batch
			// past them.
			writeRPCError(w, jsonrpc.ID{}, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest,
				Message: "Invalid Request: JSON-RPC batches are not supported: send one message a POST"})
			return nil, false
		}
		return nil, true
	}
	if err := checkID(msg, body); err != nil {
		writeRPCError(w, jsonrpc.ID{}, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "Invalid Request: " + err.Error()})
		return nil, false
	}
	return msg, true
}

// refuseVersion answers a POST whose MCP-Protocol-Version header names a
// version older than 2026-07-28 that the gateway does not serve, and
// reports whether it did: HTTP 400, as every era asks, with the
// UnsupportedProtocolVersionError 2026-07-28 requires (-32022, the versions
// served), which a client reads to pick another version. go-sdk refuses
// such a version in plain text (a newer one it answers so itself).
func refuseVersion(w http.ResponseWriter, r *http.Request, msg jsonrpc.Message) bool {
	pv := r.Header.Get("Mcp-Protocol-Version")
	if pv == "" || pv >= modernVersion || supportedVersion[pv] {
		return false
	}
	var id jsonrpc.ID
	if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() {
		id = req.ID
	}
	data, err := json.Marshal(mcp.UnsupportedProtocolVersionData{Supported: protocolVersions, Requested: pv})
	if err != nil {
		return false // go-sdk refuses it in its way
	}
	writeRPCError(w, id, &jsonrpc.Error{Code: mcp.CodeUnsupportedProtocolVersion, Message: "unsupported protocol version", Data: data})
	return true
}

// writeRPCError answers a refused POST: HTTP 400 with a JSON-RPC error body.
func writeRPCError(w http.ResponseWriter, id jsonrpc.ID, e *jsonrpc.Error) {
	writeRPC(w, http.StatusBadRequest, &jsonrpc.Response{ID: id, Error: e})
}

// writeError answers with the error contract, as the rest of the gateway does.
func writeError(w http.ResponseWriter, e *apierr.Error) { auth.WriteError(w, 0, e) }

// writeRPC writes one JSON-RPC response as the POST's application/json body
// with the given HTTP status, and sends it at once: the client has its
// answer while the handler and the middleware end their spans and record
// their metrics (with its length given, the flush does not make the body
// chunked).
func writeRPC(w http.ResponseWriter, status int, resp *jsonrpc.Response) {
	data, err := jsonrpc.EncodeMessage(resp)
	if err != nil {
		http.Error(w, "encoding the response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-cache, no-transform")
	h.Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(status)
	_, _ = w.Write(data)
	_ = http.NewResponseController(w).Flush()
}

// searchMode reads ?tools= of /mcp: "search" serves search_tools and
// call_tool instead of the tools (searchmode.go); absent, every tool unless
// the key's tools_mode is search.
func searchMode(r *http.Request) (bool, error) {
	switch r.URL.Query().Get("tools") {
	case "":
		return false, nil
	case "search":
		return true, nil
	}
	return false, apierr.Invalid("tools", "tools must be \"search\" or absent")
}
