// Package mcpserver is the gateway's aggregated MCP endpoint: one MCP server
// (go-sdk) with the tools, resources and prompts of every server mcpbus runs,
// reached over the bus only. Tools come from the catalog in KV mcp_tools,
// watched and kept in memory, so tools/list costs no bus round trip and a
// change reaches connected clients as notifications/tools/list_changed.
//
// Each principal (API key and tool filter) gets an mcp.Server of its own
// holding only the tools it may see; a filtered tool is absent from its list
// and unknown to its tools/call. The same servers answer Streamable HTTP
// (stateful sessions, or stateless per SEP-2575) and stdio.
package mcpserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
)

// Options configure the aggregate.
type Options struct {
	Prefix string
	Logger *slog.Logger
	// CallTimeout bounds one tool call (default 60s); the runner applies the
	// smaller of it and the server's own call timeout.
	CallTimeout time.Duration
	// Stateless serves Streamable HTTP without sessions: every POST stands
	// alone (protocol 2026-07-28, SEP-2575; older clients get a temporary
	// session per request). GET and DELETE answer 405.
	Stateless bool
	// JSONResponse answers POSTs with one application/json body instead of
	// an SSE stream; progress then travels on the session's GET stream.
	JSONResponse bool
	// NoAuth says the handler is served without the auth middleware: a
	// request without a Principal may see and call everything. Otherwise such
	// a request is refused, so a forgotten middleware never opens every tool.
	NoAuth bool
	// RPCTimeout bounds one server's answer to a resources, prompts or
	// completion request (default 15s): a slow server is left out of a list
	// rather than holding it up.
	RPCTimeout time.Duration
	// SessionTimeout closes stateful sessions idle that long (default 30m;
	// negative: never).
	SessionTimeout time.Duration
	// NoFastPath sends every tools/call through go-sdk's session machinery
	// (see fastcall.go); for comparison in tests and benchmarks.
	NoFastPath bool
	// Version is the serverInfo version shown to clients (default "dev").
	Version string
}

func (o *Options) defaults() {
	if o.Prefix == "" {
		o.Prefix = bus.DefaultPrefix
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = 60 * time.Second
	}
	if o.RPCTimeout <= 0 {
		o.RPCTimeout = 15 * time.Second
	}
	switch {
	case o.SessionTimeout == 0:
		o.SessionTimeout = 30 * time.Minute
	case o.SessionTimeout < 0:
		o.SessionTimeout = 0 // never
	}
	if o.Version == "" {
		o.Version = "dev"
	}
}

// viewIdle is how long the MCP server of a principal without sessions is
// kept for its next request.
const viewIdle = 10 * time.Minute

// Aggregator serves the aggregate of every MCP server on the bus.
type Aggregator struct {
	opts   Options
	log    *slog.Logger
	client *client.Client
	http   *mcp.StreamableHTTPHandler

	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	catalogs map[string]model.Catalog // by server slug
	running  map[string]bool          // servers whose status is running
	tools    map[string]*toolEntry    // by exposed name
	views    map[string]*view         // by principal key
	warned   map[string]bool          // bad catalog entries already logged
	prompts  sync.Map                 // namespaced prompt name -> promptRef, learnt from lists
	sessions sessionTable             // live stateful sessions, for the fast path and idle timeouts
}

// view is the MCP server of one principal: the tools it may see.
type view struct {
	key       string
	principal *auth.Principal
	server    *mcp.Server
	installed map[string]*toolEntry
	lastUsed  atomic.Int64
}

func (v *view) touch() { v.lastUsed.Store(time.Now().UnixNano()) }

// New starts the catalog watch (ctx bounds it) and returns once the stored
// catalog is loaded, so the first tools/list is complete.
func New(ctx context.Context, nc *nats.Conn, opts Options) (*Aggregator, error) {
	opts.defaults()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("mcpserver: jetstream: %w", err)
	}
	setup, cancelSetup := context.WithTimeout(ctx, 10*time.Second)
	defer cancelSetup()
	tools, status, err := buckets(setup, js, opts.Prefix)
	if err != nil {
		return nil, err
	}
	a := &Aggregator{
		opts: opts, log: opts.Logger,
		client:   client.New(nc, client.Options{Prefix: opts.Prefix, Timeout: opts.CallTimeout}),
		catalogs: map[string]model.Catalog{}, running: map[string]bool{},
		tools: map[string]*toolEntry{}, views: map[string]*view{},
	}
	a.http = mcp.NewStreamableHTTPHandler(a.getServer, &mcp.StreamableHTTPOptions{
		Stateless: opts.Stateless, JSONResponse: opts.JSONResponse, Logger: opts.Logger,
		// Idle sessions are closed by the aggregate (sessionTable): go-sdk
		// never sees the calls of the fast path.
		// A stateless POST is the whole request: a client that hangs up cancels the call.
		PropagateRequestCancellation: true,
	})
	wctx, cancel := context.WithCancel(ctx)
	a.cancel = cancel
	toolsReady, statusReady := make(chan struct{}), make(chan struct{})
	a.wg.Add(3)
	go func() {
		defer a.wg.Done()
		watchKV(wctx, a.log, nc, tools, decodeJSON[model.Catalog], a.applyCatalogs, toolsReady)
	}()
	go func() {
		defer a.wg.Done()
		watchKV(wctx, a.log, nc, status, decodeJSON[model.Status], a.applyStatus, statusReady)
	}()
	go func() { defer a.wg.Done(); a.janitor(wctx) }()
	for _, ready := range []chan struct{}{toolsReady, statusReady} {
		select {
		case <-ready:
		case <-setup.Done():
			a.Close()
			return nil, fmt.Errorf("mcpserver: loading the tool catalog: %w", setup.Err())
		}
	}
	return a, nil
}

// buckets opens KV mcp_tools and mcp_status, creating the shared assets when
// the gateway is the first service up.
func buckets(ctx context.Context, js jetstream.JetStream, prefix string) (tools, status jetstream.KeyValue, err error) {
	tools, err = js.KeyValue(ctx, bus.BucketTools)
	if err == nil {
		status, err = js.KeyValue(ctx, bus.BucketStatus)
	}
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		var assets *bus.Assets
		if assets, err = bus.EnsureAssets(ctx, js, bus.NewSubjects(prefix), bus.AssetOptions{}); err == nil {
			return assets.Tools, assets.Status, nil
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("mcpserver: opening the catalog buckets: %w", err)
	}
	return tools, status, nil
}

func decodeJSON[T any](data []byte) (T, error) {
	var v T
	err := json.Unmarshal(data, &v)
	return v, err
}

// applyCatalogs installs a new state of KV mcp_tools: the tool set is derived
// again and every principal's server gets the difference (go-sdk then tells
// its sessions tools/list_changed).
func (a *Aggregator) applyCatalogs(catalogs map[string]model.Catalog) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.catalogs = catalogs
	warned := map[string]bool{}
	a.tools = deriveTools(catalogs, a.tools, func(t model.Tool, err error) {
		// Warn once per bad entry, not again at every catalog change.
		key := t.Server + "\x00" + t.Tool + "\x00" + err.Error()
		warned[key] = true
		if !a.warned[key] {
			a.log.Warn("catalog entry left out of the aggregate", "server", t.Server, "tool", t.Tool, "error", err)
		}
	})
	a.warned = warned
	for _, v := range a.views {
		a.syncView(v)
	}
}

func (a *Aggregator) applyStatus(status map[string]model.Status) {
	running := make(map[string]bool, len(status))
	for slug, st := range status {
		running[slug] = st.State == model.StateRunning
	}
	a.mu.Lock()
	a.running = running
	a.mu.Unlock()
}

// syncView brings a principal's server in line with the tool set; a.mu is held.
func (a *Aggregator) syncView(v *view) {
	var gone []string
	for name := range v.installed {
		if _, ok := a.tools[name]; !ok || !v.principal.AllowsTool(name) {
			gone = append(gone, name)
			delete(v.installed, name)
		}
	}
	if len(gone) > 0 {
		v.server.RemoveTools(gone...)
	}
	for name, e := range a.tools {
		if v.installed[name] == e || !v.principal.AllowsTool(name) {
			continue
		}
		if a.addTool(v.server, e) {
			v.installed[name] = e
		}
	}
}

// addTool adds e to s. go-sdk panics on tools it cannot serve (a bad
// x-mcp-header annotation, say): such a tool is left out, not the gateway.
func (a *Aggregator) addTool(s *mcp.Server, e *toolEntry) (ok bool) {
	if e.unservable {
		return false
	}
	defer func() {
		if p := recover(); p != nil {
			a.log.Warn("tool left out of the aggregate", "server", e.cat.Server, "tool", e.cat.Tool, "error", fmt.Sprint(p))
			e.unservable = true
			ok = false
		}
	}()
	s.AddTool(e.tool, a.toolHandler(e))
	return true
}

// viewKey identifies a principal's server: its key and its filter, so a
// changed filter gets a fresh server (and the old sessions end).
func viewKey(p *auth.Principal) string {
	f, _ := json.Marshal(p.Tools)
	sum := sha256.Sum256([]byte(p.KeyID + "\x00" + string(f)))
	return hex.EncodeToString(sum[:8])
}

// viewFor returns the server of p, creating it on first use.
func (a *Aggregator) viewFor(p *auth.Principal) (*view, error) {
	key := viewKey(p)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, apierr.New(apierr.ServiceUnavailable, "the MCP gateway is shutting down")
	}
	if v, ok := a.views[key]; ok {
		v.touch()
		return v, nil
	}
	cp := *p
	v := &view{key: key, principal: &cp, installed: map[string]*toolEntry{}}
	v.server = mcp.NewServer(&mcp.Implementation{Name: "mcpbus", Title: "mcpbus", Version: a.opts.Version}, &mcp.ServerOptions{
		Instructions: "The tools, resources and prompts of every MCP server mcpbus runs. " +
			"Tools and prompts are named <server>__<name>; resource URIs are mcpbus://<server>/<escaped original URI>. " +
			"_meta of each names the server (" + MetaServer + ") and the original name.",
		Logger: a.log,
		Capabilities: &mcp.ServerCapabilities{
			Tools:       &mcp.ToolCapabilities{ListChanged: true},
			Resources:   &mcp.ResourceCapabilities{},
			Prompts:     &mcp.PromptCapabilities{},
			Completions: &mcp.CompletionCapabilities{},
		},
		CompletionHandler: func(ctx context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
			return a.complete(ctx, v, req)
		},
		// The session id starts with the view's key: Handler refuses a
		// session id used by another key (or under a changed filter).
		GetSessionID: func() string { return key + "-" + rand.Text() },
	})
	v.server.AddReceivingMiddleware(a.features(v))
	v.touch()
	a.syncView(v)
	a.views[key] = v
	return v, nil
}

// janitor closes sessions idle for SessionTimeout and drops the servers of
// principals that have had no session for viewIdle.
func (a *Aggregator) janitor(ctx context.Context) {
	every := time.Minute
	if st := a.opts.SessionTimeout; st > 0 && st/4 < every {
		every = max(st/4, 10*time.Millisecond)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if a.opts.SessionTimeout > 0 && !a.opts.Stateless {
			a.mu.Lock()
			views := make([]*view, 0, len(a.views))
			for _, v := range a.views {
				views = append(views, v)
			}
			a.mu.Unlock()
			a.sessions.closeIdle(views, time.Now().Add(-a.opts.SessionTimeout))
		}
		a.sweep(time.Now().Add(-viewIdle))
	}
}

// sweep drops the servers unused since cutoff that have no session.
func (a *Aggregator) sweep(cutoff time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for key, v := range a.views {
		if v.lastUsed.Load() > cutoff.UnixNano() {
			continue
		}
		busy := false
		for range v.server.Sessions() {
			busy = true
			break
		}
		if !busy {
			delete(a.views, key)
		}
	}
}

// DropKey ends every MCP session opened with keyID and forgets its views:
// called when the key is revoked, so a revoked key keeps nothing open.
func (a *Aggregator) DropKey(keyID string) {
	a.mu.Lock()
	var dropped []*view
	for key, v := range a.views {
		if v.principal.KeyID == keyID {
			dropped = append(dropped, v)
			delete(a.views, key)
		}
	}
	a.mu.Unlock()
	for _, v := range dropped {
		for ss := range v.server.Sessions() {
			a.sessions.close(ss)
		}
	}
	if len(dropped) > 0 {
		a.log.Info("API key revoked: its MCP sessions were closed", "key_id", keyID, "views", len(dropped))
	}
}

type viewCtxKey struct{}

// Handler is the Streamable HTTP endpoint. Each request's principal
// (auth.PrincipalFrom) chooses the tools it sees.
func (a *Aggregator) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := auth.PrincipalFrom(r.Context())
		if p == nil {
			if !a.opts.NoAuth {
				writeError(w, apierr.New(apierr.Unauthorized, "an API key is required"))
				return
			}
			p = auth.Anonymous()
		}
		if !p.Can(auth.ScopeCall) {
			writeError(w, apierr.New(apierr.Unauthorized, "this API key may not list or call tools (scope call)"))
			return
		}
		v, err := a.viewFor(p)
		if err != nil {
			writeError(w, apierr.From(err))
			return
		}
		// A session belongs to the key (and filter) that opened it; to anyone
		// else it does not exist, which tells a client to start a new one.
		if sid := r.Header.Get("Mcp-Session-Id"); sid != "" && !a.opts.Stateless && !strings.HasPrefix(sid, v.key+"-") {
			http.Error(w, "session not found", http.StatusNotFound)
			return
		}
		var ls *liveSession
		if sid := r.Header.Get("Mcp-Session-Id"); sid != "" && !a.opts.Stateless {
			if ls = a.sessions.lookup(v, sid); ls != nil {
				ls.touch()
				switch r.Method {
				case http.MethodPost: // a session is not idle while it has a POST in flight
					ls.posts.Add(1)
					defer func() { ls.posts.Add(-1); ls.touch() }()
				case http.MethodDelete: // closed from now on, for the fast path too
					a.sessions.forget(sid)
				}
			}
		}
		if r.Method == http.MethodPost {
			msg, ok := precheck(w, r)
			if !ok {
				return
			}
			if msg != nil && !a.opts.NoFastPath && a.fastPath(w, r, v, ls, msg) {
				return
			}
		}
		a.http.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), viewCtxKey{}, v)))
	})
}

// serverMethods are the requests an MCP server receives (go-sdk v1.8.0).
var serverMethods = map[string]bool{
	"initialize": true, "ping": true, "server/discover": true, "subscriptions/listen": true,
	"tools/list": true, "tools/call": true, "prompts/list": true, "prompts/get": true,
	"resources/list": true, "resources/templates/list": true, "resources/read": true,
	"resources/subscribe": true, "resources/unsubscribe": true,
	"completion/complete": true, "logging/setLevel": true,
}

// precheck answers the bad POSTs that go-sdk refuses in plain text with the
// JSON-RPC error of the spec instead, still with HTTP 400 (Streamable HTTP
// lets the body of a refused POST be a JSON-RPC error): a body that is not
// JSON (-32700, no id) and a request for a method no MCP server has (-32601).
// Requests of protocol 2026-07-28 get -32601 from go-sdk itself; bodies over
// its size limit are left for it to refuse.
//
// It returns the decoded message (nil when the body is not one JSON-RPC
// message of an older protocol) for the call fast path, with the body left
// readable for go-sdk.
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
	if r.Header.Get("Mcp-Protocol-Version") >= "2026-07-28" {
		return nil, !notJSON()
	}
	// Decoding fails on bad JSON too: the separate scan is only needed then.
	msg, err := jsonrpc.DecodeMessage(body)
	if err != nil {
		return nil, !notJSON()
	}
	if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() && !serverMethods[req.Method] {
		writeRPCError(w, req.ID, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: fmt.Sprintf("Method not found: %q", req.Method)})
		return nil, false
	}
	return msg, true
}

// writeRPCError answers a refused POST: HTTP 400 with a JSON-RPC error body.
func writeRPCError(w http.ResponseWriter, id jsonrpc.ID, e *jsonrpc.Error) {
	writeRPC(w, http.StatusBadRequest, &jsonrpc.Response{ID: id, Error: e})
}

func (a *Aggregator) getServer(r *http.Request) *mcp.Server {
	if v, ok := r.Context().Value(viewCtxKey{}).(*view); ok {
		return v.server
	}
	return nil
}

// writeError answers with the error contract, as the rest of the gateway does.
func writeError(w http.ResponseWriter, e *apierr.Error) { auth.WriteError(w, 0, e) }

// ServeStdio serves the aggregate to one client over stdin/stdout until the
// client hangs up or ctx ends. A nil p sees everything (a local command).
func (a *Aggregator) ServeStdio(ctx context.Context, p *auth.Principal) error {
	return a.Serve(ctx, p, &mcp.StdioTransport{})
}

// Serve serves the aggregate to one client over any go-sdk transport.
func (a *Aggregator) Serve(ctx context.Context, p *auth.Principal, t mcp.Transport) error {
	if p == nil {
		p = auth.Anonymous()
	}
	if !p.Can(auth.ScopeCall) {
		return apierr.New(apierr.Unauthorized, "this API key may not list or call tools (scope call)")
	}
	v, err := a.viewFor(p)
	if err != nil {
		return err
	}
	if err := v.server.Run(ctx, t); err != nil && ctx.Err() == nil {
		return fmt.Errorf("mcpserver: serving: %w", err)
	}
	return nil
}

// Close stops the catalog watch and ends every session.
func (a *Aggregator) Close() {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return
	}
	a.closed = true
	views := make([]*view, 0, len(a.views))
	for _, v := range a.views {
		views = append(views, v)
	}
	a.mu.Unlock()
	a.cancel()
	a.wg.Wait()
	for _, v := range views {
		for s := range v.server.Sessions() {
			a.sessions.close(s)
		}
	}
}
