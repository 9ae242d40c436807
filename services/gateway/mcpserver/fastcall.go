package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/approvals"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/jsonscan"
	"github.com/mcpbus/mcpbus/libs/telemetry/conv"
	"github.com/mcpbus/mcpbus/services/gateway/internal/httpguard"
)

// The call fast path. A tools/call is most of an agent's traffic, and
// go-sdk's Streamable HTTP server spends more CPU on it than the bus hop and
// the runner together: a logical stream per POST, a session's JSON-RPC
// connection with its goroutine hand-offs (a temporary one per request of
// 2026-07-28), the result decoded into a CallToolResult and encoded again. A
// call that needs none of that is answered here instead: no progress token,
// and either a live initialized session of this principal without
// per-request metadata, or a request of 2026-07-28 whose headers and _meta
// go-sdk would accept. It is decoded and encoded with go-sdk's jsonrpc
// package, the arguments checked against the same schema, the runner's
// result passed through as raw JSON (with the fields of the client's era,
// eras.go) in one application/json response, which Streamable HTTP allows
// for any POST. Anything else, and anything in doubt, goes to go-sdk
// unchanged, which answers it (or refuses it) as before.
//
// Because such calls never reach go-sdk's session, its idle timer would not
// see them: the aggregate keeps the sessions' idle time itself (sessions.go)
// and go-sdk's own timeout is off.

// callParams picks name, arguments and _meta out of tools/call params by
// their exact keys, as go-sdk's decoder does (encoding/json would also take
// "Name" for "name"). A multi round-trip retry (inputResponses,
// requestState) is not for the fast path: not ok. The params were decoded
// once already (the message is valid JSON), so their members are walked
// without decoding them into a map; a key written with escapes goes to the
// map decode, whose keys are unescaped.
func callParams(raw json.RawMessage) (name string, args json.RawMessage, meta map[string]json.RawMessage, ok bool) {
	var rawName, rawMeta json.RawMessage
	escaped, retry := false, false
	if !jsonscan.Members(raw, func(key, val []byte) bool {
		switch string(key) {
		case "name":
			rawName = val
		case "arguments":
			args = val
		case "_meta":
			rawMeta = val
		case "inputResponses", "requestState":
			retry = true
			return false
		default:
			escaped = bytes.IndexByte(key, '\\') >= 0
			return !escaped
		}
		return true
	}) || escaped {
		return callParamsDecoded(raw)
	}
	if retry || json.Unmarshal(rawName, &name) != nil || name == "" {
		return "", nil, nil, false
	}
	if rawMeta != nil && json.Unmarshal(rawMeta, &meta) != nil {
		return "", nil, nil, false
	}
	return name, args, meta, true
}

// callParamsDecoded is callParams through a map of the members, for params
// whose keys hold escapes.
func callParamsDecoded(raw json.RawMessage) (name string, args json.RawMessage, meta map[string]json.RawMessage, ok bool) {
	var fields map[string]json.RawMessage
	if json.Unmarshal(raw, &fields) != nil {
		return "", nil, nil, false
	}
	if _, retry := fields["inputResponses"]; retry {
		return "", nil, nil, false
	}
	if _, retry := fields["requestState"]; retry {
		return "", nil, nil, false
	}
	if json.Unmarshal(fields["name"], &name) != nil || name == "" {
		return "", nil, nil, false
	}
	if m, present := fields["_meta"]; present && json.Unmarshal(m, &meta) != nil {
		return "", nil, nil, false
	}
	return name, fields["arguments"], meta, true
}

// cancelledParams is what the fast path needs of notifications/cancelled.
type cancelledParams struct {
	RequestID any `json:"requestId"`
}

// fastPath answers msg itself when it can and reports whether it did; ls is
// the request's live session (nil: none, as for a request of 2026-07-28).
func (a *Aggregator) fastPath(w http.ResponseWriter, r *http.Request, v *view, ls *liveSession, msg jsonrpc.Message) bool {
	req, ok := msg.(*jsonrpc.Request)
	if !ok {
		return false
	}
	if !req.IsCall() {
		return false
	}
	if req.Method != "tools/call" || !eligible(r) {
		return false
	}
	name, rawArgs, reqMeta, ok := callParams(req.Params)
	if !ok {
		return false
	}
	if _, ok := reqMeta["progressToken"]; ok {
		return false // progress streams: go-sdk's SSE response
	}
	modern := ls == nil
	protocol := modernVersion
	if modern {
		if !modernCall(r, name, reqMeta) {
			return false
		}
	} else {
		ip := ls.ss.InitializeParams()
		if ip == nil || r.Header.Get("Mcp-Protocol-Version") >= modernVersion || asksClient(ls.ss) {
			return false // asksClient: the server's requests need go-sdk's stream
		}
		protocol = negotiated(ip.ProtocolVersion)
		for k := range reqMeta {
			if strings.HasPrefix(k, "io.modelcontextprotocol/") {
				return false // per-request protocol metadata: go-sdk decides
			}
		}
	}
	e := a.awaitTool(r.Context(), v, name, v.tool)
	if e == nil {
		return false // go-sdk answers unknown tools
	}
	if modern && e.paramHeaders() {
		return false // go-sdk checks the Mcp-Param-* headers of x-mcp-header arguments
	}

	base := r.Context()
	if ls != nil {
		// A session's call outlives its POST, as in go-sdk's session: the
		// spec (2025-11-25) has a disconnection not read as a cancellation
		// (notifications/cancelled, the session's end and the call timeout
		// end it). A request of 2026-07-28 is its POST: it ends with it.
		base = context.WithoutCancel(base)
	}
	ctx, cancel := context.WithCancelCause(base)
	defer cancel(nil)
	sessionID := ""
	if ls != nil {
		sessionID = ls.ss.ID()
		idKey := idString(req.ID)
		if _, dup := ls.inflight.LoadOrStore(idKey, cancel); dup {
			writeRPCError(w, req.ID, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest,
				Message: fmt.Sprintf("duplicate in-flight request ID %v", req.ID.Raw())})
			return true
		}
		defer ls.inflight.Delete(idKey)
		stop := context.AfterFunc(ls.done, func() { cancel(nil) }) // the session closed: the call ends
		defer stop()
	}

	meta := traceMembers(reqMeta) // the client's trace context, if it sent one
	ctx, op := a.tel.start(ctx, opRequest{method: "tools/call", target: name, header: r.Header, meta: meta,
		id: &req.ID, session: sessionID, protocol: protocol,
		extra: []attribute.KeyValue{conv.GenAIToolName.String(name), conv.OperationExecuteTool}})
	var serverInfo json.RawMessage
	if modern {
		serverInfo = a.serverInfo
	}
	outcome, err := a.fastCall(ctx, w, r, v, e, req, rawArgs, serverInfo)
	if err != nil {
		outcome = errorType(err)
	}
	op.End(ctx, outcome, err)
	return true
}

// modernCall reports whether a tools/call of protocol 2026-07-28 is one the
// fast path may answer: its headers and _meta are as go-sdk requires them
// (anything else, go-sdk answers with the error of the spec), it carries
// no other per-request protocol field, and its client declared neither
// elicitation nor sampling (its calls may need multi round-trip results).
func modernCall(r *http.Request, name string, meta map[string]json.RawMessage) bool {
	if r.Header.Get("Mcp-Protocol-Version") != modernVersion ||
		r.Header.Get("Mcp-Method") != "tools/call" || r.Header.Get("Mcp-Name") != name {
		return false
	}
	var version string
	if json.Unmarshal(meta[mcp.MetaKeyProtocolVersion], &version) != nil || version != modernVersion {
		return false
	}
	var caps map[string]json.RawMessage
	if json.Unmarshal(meta[mcp.MetaKeyClientCapabilities], &caps) != nil || caps == nil {
		return false
	}
	if _, ok := caps["elicitation"]; ok {
		return false // the server's requests come back as input_required rounds (mrtr.go)
	}
	if _, ok := caps["sampling"]; ok {
		return false
	}
	if raw, ok := meta[mcp.MetaKeyClientInfo]; ok {
		var info mcp.Implementation
		if json.Unmarshal(raw, &info) != nil {
			return false
		}
	}
	for k := range meta {
		switch k {
		//lint:ignore SA1019 clients still send it in the deprecation window and go-sdk accepts it; a call logs nothing
		case mcp.MetaKeyProtocolVersion, mcp.MetaKeyClientCapabilities, mcp.MetaKeyClientInfo, mcp.MetaKeyLogLevel:
		default:
			if strings.HasPrefix(k, "io.modelcontextprotocol/") {
				return false
			}
		}
	}
	return true
}

// fastCall answers one tools/call of the fast path; it returns the error or
// "tool_error" for the span. serverInfo is set for a client of 2026-07-28
// (see eraResult).
func (a *Aggregator) fastCall(ctx context.Context, w http.ResponseWriter, r *http.Request, v *view, e *toolEntry, req *jsonrpc.Request, rawArgs, serverInfo json.RawMessage) (string, error) {
	fail := func(e *jsonrpc.Error) {
		writeRPC(w, errorStatus(serverInfo != nil, e), &jsonrpc.Response{ID: req.ID, Error: e})
	}
	args, bad, mismatch := checkArguments(e, rawArgs)
	if bad != nil {
		fail(rpcError(jsonrpc.CodeInvalidParams, bad))
		return "", bad
	}
	toolError := func(res *mcp.CallToolResult) (string, error) {
		raw, err := json.Marshal(res)
		if err == nil {
			raw, err = eraResult(raw, serverInfo)
		}
		if err != nil {
			return "", fmt.Errorf("encoding a tool result: %w", err)
		}
		writeRPC(w, http.StatusOK, &jsonrpc.Response{ID: req.ID, Result: json.RawMessage(raw)})
		return conv.ToolError, nil
	}
	if mismatch != nil {
		return toolError(mismatchResult(mismatch))
	}
	if a.opts.Approvals != nil {
		// A client that cannot be asked: a held call waits for an approver.
		msg, err := a.opts.Approvals.Enforce(ctx, approvals.Call{Principal: v.principal.Bus().ID,
			Server: e.cat.Server, Tool: e.name, ServerTool: e.cat.Tool, Arguments: args}, nil)
		if err != nil {
			fail(approvalError(err))
			return "", err
		}
		if msg != "" {
			return toolError(refused(msg))
		}
	}
	if res := a.restartResult(e); res != nil {
		return toolError(res)
	}
	ctx, cancelTimeout := context.WithTimeout(ctx, a.opts.CallTimeout)
	defer cancelTimeout()

	got, err := a.client.CallResult(e.vouch(ctx), e.cat.Server, e.cat.Tool, args, &client.CallOptions{})
	raw := got.Data
	if errors.Is(context.Cause(ctx), errCancelledByClient) {
		// The spec: the receiver of a cancellation SHOULD NOT answer the
		// request (a client that forgot the id flags an answer as unknown),
		// even when the result won the race.
		answerNothing(w)
		return "", errCancelledByClient
	}
	if err != nil {
		if r.Context().Err() != nil {
			return "", err // the client hung up: nobody to answer
		}
		res := a.unservedResult(e, err)
		if res == nil {
			// The fast path serves no client with elicitation: a prompt is a tool error.
			if res, _, _ = a.authorizationPrompt(ctx, nil, nil, e, err); res == nil {
				fail(a.callError(ctx, e, err))
				return "", err
			}
		}
		if raw, err = json.Marshal(res); err != nil {
			return "", fmt.Errorf("encoding a tool result: %w", err)
		}
		got = client.Result{Checked: true, IsError: true}
	}
	ok, isError := got.Checked, got.IsError // the runner checked it: no second decode
	if !ok {
		ok, isError = toolResult(raw)
	}
	if ok {
		raw, err = eraResult(linkedURIs(raw, e.cat.Server), serverInfo)
		ok = err == nil
	}
	if !ok {
		a.log.Warn("tool result is not a CallToolResult", "tool", e.name)
		e := apierr.Newf(apierr.Internal, "tool %s returned a result that is not a CallToolResult", e.name)
		fail(rpcError(jsonrpc.CodeInternalError, e))
		return "", e
	}
	writeRPC(w, http.StatusOK, &jsonrpc.Response{ID: req.ID, Result: json.RawMessage(raw)})
	if isError {
		return conv.ToolError, nil
	}
	return "", nil
}

// errorStatus is the HTTP status of a JSON-RPC error answer: 200 for the
// initialize era; for 2026-07-28, what SEP-2575 requires (as go-sdk does):
// 404 for -32601, 400 for -32602.
func errorStatus(modern bool, e *jsonrpc.Error) int {
	switch {
	case !modern:
		return http.StatusOK
	case e.Code == jsonrpc.CodeMethodNotFound:
		return http.StatusNotFound
	case e.Code == jsonrpc.CodeInvalidParams:
		return http.StatusBadRequest
	}
	return http.StatusOK
}

// toolResult is a cheap check of the runner's reply (which it encodes from
// go-sdk's CallToolResult): a JSON object whose content is an array; and
// whether it is a tool error.
func toolResult(raw []byte) (ok, isError bool) {
	var res struct {
		Content json.RawMessage `json:"content"`
		IsError bool            `json:"isError"`
	}
	if json.Unmarshal(raw, &res) != nil {
		return false, false
	}
	c := bytes.TrimSpace(res.Content)
	return len(c) > 0 && c[0] == '[', res.IsError
}

// eligible says whether the HTTP side of r is one go-sdk would serve without
// objection: anything else goes to go-sdk, which gives the answer of the spec.
func eligible(r *http.Request) bool {
	if pv := r.Header.Get("Mcp-Protocol-Version"); pv != modernVersion && !supportedVersion[pv] {
		return false
	}
	if !jsonContent(r.Header.Get("Content-Type")) {
		return false
	}
	// Last-Event-ID in its canonical form: Get would allocate to canonicalize it.
	if r.Header.Get("Last-Event-Id") != "" {
		return false // a resumption: go-sdk's business
	}
	if !acceptsBoth(r.Header.Values("Accept")) {
		return false
	}
	// go-sdk's DNS-rebinding guard: a loopback listener reached by a foreign Host.
	if httpguard.ForeignHost(r) {
		return false
	}
	return true
}

// supportedVersion are the stateful protocol versions of go-sdk v1.8.0
// (modernVersion is the stateless one).
var supportedVersion = map[string]bool{"2025-11-25": true, "2025-06-18": true, "2025-03-26": true, "2024-11-05": true}

// protocolVersions are the versions /mcp serves, newest first, as go-sdk
// lists them in its UnsupportedProtocolVersionError.
var protocolVersions = []string{modernVersion, "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}

// negotiated is the protocol version of a session whose client asked for v
// in initialize, as go-sdk negotiates it: v when supported, else the
// latest stateful version. Telemetry records it, never v itself: a
// client's string of any length and value (go-sdk keeps the asked one in
// InitializeParams) would be a metric label.
func negotiated(v string) string {
	if supportedVersion[v] {
		return v
	}
	return "2025-11-25"
}

// jsonContent reports whether a Content-Type is application/json, as
// mime.ParseMediaType reads it; the plain spelling every client sends is
// matched without it (it allocates a map of the parameters each request).
func jsonContent(ct string) bool {
	if ct == "application/json" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "application/json"
}

// acceptsBoth is go-sdk's rule: a POST must accept JSON and an event stream.
// The values are walked in place (strings.Split would allocate each request).
func acceptsBoth(values []string) bool {
	var j, s bool
	for _, v := range values {
		for rest, more := v, true; more; {
			var tok string
			tok, rest, more = strings.Cut(rest, ",")
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

// errCancelledByClient is the cause of a fast-path call's end when its
// client's notifications/cancelled named it.
var errCancelledByClient = errors.New("cancelled by the client")

// answerNothing ends the POST of a cancelled request without a JSON-RPC
// response: an event stream with no event, which Streamable HTTP allows.
func answerNothing(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache, no-transform")
	w.WriteHeader(http.StatusOK)
}

// cancelFast cancels the fast-path call a notifications/cancelled names, or
// marks the go-sdk call it names so that its response is dropped
// (cancelled.go).
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
		c.(context.CancelCauseFunc)(errCancelledByClient)
	}
	ls.markCancelled(id)
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
