// Package mcpserver is the gateway's aggregated MCP endpoint: one MCP server
// (go-sdk) with the tools, resources and prompts of every server mcpbus runs,
// reached over the bus only. Tools come from the catalog in KV mcp_tools,
// watched and kept in memory, so tools/list costs no bus round trip and a
// change reaches connected clients as notifications/tools/list_changed.
//
// Each principal (API key and tool filter) gets an mcp.Server of its own
// holding only the tools it may see; a filtered tool is absent from its list
// and unknown to its tools/call. The same servers answer Streamable HTTP and
// stdio. One HTTP endpoint serves both eras of the protocol, chosen per
// request (handler.go): stateful sessions (initialize, up to 2025-11-25) and
// the sessionless protocol 2026-07-28 (SEP-2575).
package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/approvals"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/toolsearch"
	"github.com/mcpbus/mcpbus/services/gateway/internal/restarts"
)

// Options configure the aggregate.
type Options struct {
	Prefix string
	Logger *slog.Logger
	// MayPublish: client.Options.MayPublish (the in-process hand-off).
	MayPublish func(subject string) bool
	// Tie: client.Options.Tie (a call whose runner dies, or whose reply a
	// drop lost, ends then).
	Tie client.TieFunc
	// CallTimeout bounds one tool call (default 60s); the runner applies the
	// smaller of it and the server's own call timeout.
	CallTimeout time.Duration
	// Stateless serves Streamable HTTP without sessions for every client:
	// older clients get a temporary session per request, and GET and DELETE
	// answer 405. Without it, requests of protocol 2026-07-28 (SEP-2575) are
	// served without sessions and older ones in stateful sessions.
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
	// MaxSessions bounds one principal's stateful sessions (per view: key,
	// filter, mode; default 100): opening another closes their least
	// recently used one without a request in flight (none: 429), so a key
	// cannot hold the gateway's memory with sessions it never closes.
	MaxSessions int
	// MaxListens bounds one principal's open subscriptions/listen streams
	// (default 64; listens.go): the next is refused until one ends.
	MaxListens int
	// StreamWriteTimeout bounds each write of a response of /mcp, its SSE
	// streams included (default 10s): a client that stops reading has its
	// connection cut then, instead of holding the goroutine writing to it
	// (and whatever that goroutine serves) for as long as it likes.
	StreamWriteTimeout time.Duration
	// NoFastPath sends every tools/call through go-sdk's session machinery
	// (see fastcall.go); for comparison in tests and benchmarks.
	NoFastPath bool
	// Version is the serverInfo version shown to clients (default "dev").
	Version string
	// Agent, when set, is the agent whose identity the connection has: the
	// aggregate follows its own tools.list instead of the catalog buckets
	// (followAgent) and calls on its own subjects (mcpbus serve-stdio as an
	// agent).
	Agent string
	// Local says the aggregate serves clients of this process alone
	// (serve-stdio): no other instance passes it the retries of held calls,
	// so it takes none (gateway.retry.* is the gateways' own subject).
	Local bool
	// Approvals, when set, applies the gateway's approval rules to every
	// tools/call (approvals.go); nil lets every call through.
	Approvals *approvals.Store
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
	if o.StreamWriteTimeout <= 0 {
		o.StreamWriteTimeout = 10 * time.Second
	}
	switch {
	case o.SessionTimeout == 0:
		o.SessionTimeout = 30 * time.Minute
	case o.SessionTimeout < 0:
		o.SessionTimeout = 0 // never
	}
	if o.MaxSessions <= 0 {
		o.MaxSessions = 100
	}
	if o.MaxListens <= 0 {
		o.MaxListens = 64
	}
	if o.Version == "" {
		o.Version = "dev"
	}
}

// Aggregator serves the aggregate of every MCP server on the bus.
type Aggregator struct {
	opts   Options
	log    *slog.Logger
	sdkLog *slog.Logger // log for go-sdk (sdklog.go)
	client *client.Client
	nc     *nats.Conn
	impl   *mcp.Implementation
	// serverInfo is impl as JSON, for the _meta of fast-path results of 2026-07-28.
	serverInfo json.RawMessage
	// http serves the stateful sessions of older clients, stateless the
	// requests of protocol 2026-07-28 (and every request with Stateless).
	http, stateless *mcp.StreamableHTTPHandler

	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	catalogs map[string]model.Catalog // by server slug
	running  map[string]bool          // servers whose status is running
	ran      map[string]bool          // servers that ran since they entered the catalog (listchanged.go)
	ranKey   string                   // the names in ran, as trackRan last saw them
	restarts *restarts.Catalogs       // live catalogs and those kept through a restart
	tools    map[string]*toolEntry    // by exposed name
	search   *toolsearch.Index        // tools, by exposed name, for search_tools
	views    map[string]*view         // by principal key
	warned   map[string]bool          // bad catalog entries already logged
	prompts  sync.Map                 // namespaced prompt name -> promptRef, learnt from lists
	learnt   atomic.Int64             // entries of prompts (learnPrompt)
	sessions sessionTable             // live stateful sessions, for the fast path and idle timeouts
	listens  listenCounts             // open subscriptions/listen streams by principal (listens.go)
	held     heldCalls                // bus calls held across the rounds of 2026-07-28 clients (mrtr.go)
	sealer   *stateSealer             // seals their requestState (mrtrstate.go)
	retries  *nats.Subscription       // retries of held calls other instances pass on (mrtrforward.go)
	notices  []*nats.Subscription     // the runners' resource_updated and list_changed events (subscriptions.go)
	renew    renewals                 // renewals of their leases (subscriptions.go)
	pushes   taskPushes               // tasks of this instance's sessions, for their status pushes (taskpush.go)
	tel      serverTelemetry
	// authorizer starts a caller's own OAuth flow (authprompt.go).
	authorizer Authorizer

	// toolsKV is KV mcp_tools (nil for an agent's aggregate), read on a
	// miss; catalogRev is the revision of it the watch has installed, and
	// catalogMoved is closed when it moves (under mu; catchup.go).
	toolsKV      jetstream.KeyValue
	catalogRev   uint64
	catalogMoved chan struct{}
	// watchGate is held (read) while a catalog update is installed; tests
	// hold it to stand for a watch that lags (export_test.go).
	watchGate sync.RWMutex
}

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
	var tools, status jetstream.KeyValue
	if opts.Agent == "" {
		if tools, status, err = buckets(setup, js, opts.Prefix); err != nil {
			return nil, err
		}
	}
	a := &Aggregator{
		opts: opts, log: opts.Logger, sdkLog: sdkLogger(opts.Logger),
		client: client.New(nc, client.Options{Prefix: opts.Prefix, Timeout: opts.CallTimeout, Agent: opts.Agent, MayPublish: opts.MayPublish, Tie: opts.Tie}), nc: nc,
		catalogs: map[string]model.Catalog{}, running: map[string]bool{}, ran: map[string]bool{}, restarts: restarts.New(),
		tools: map[string]*toolEntry{}, search: toolsearch.New(), views: map[string]*view{}, tel: newServerTelemetry(),
		toolsKV: tools, catalogMoved: make(chan struct{}), renew: renewals{kick: make(chan struct{}, 1)},
	}
	if a.sealer, err = newStateSealer(); err != nil {
		return nil, fmt.Errorf("mcpserver: %w", err)
	}
	a.impl = &mcp.Implementation{Name: "mcpbus", Title: "mcpbus", Version: opts.Version}
	if a.serverInfo, err = json.Marshal(a.impl); err != nil {
		return nil, fmt.Errorf("mcpserver: encoding serverInfo: %w", err)
	}
	// Idle sessions are closed by the aggregate (sessionTable): go-sdk
	// never sees the calls of the fast path.
	a.http = mcp.NewStreamableHTTPHandler(a.getServer, &mcp.StreamableHTTPOptions{
		JSONResponse: opts.JSONResponse, Logger: a.sdkLog,
	})
	a.stateless = mcp.NewStreamableHTTPHandler(a.getServer, &mcp.StreamableHTTPOptions{
		Stateless: true, JSONResponse: opts.JSONResponse, Logger: a.sdkLog,
		// A stateless POST is the whole request: a client that hangs up cancels the call.
		PropagateRequestCancellation: true,
	})
	wctx, cancel := context.WithCancel(ctx)
	a.cancel = cancel
	if !opts.Local {
		if a.retries, err = a.serveRetries(wctx); err != nil {
			cancel()
			return nil, err
		}
	}
	if opts.Agent == "" {
		if a.notices, err = a.followNotices(bus.NewSubjects(opts.Prefix)); err != nil {
			cancel()
			if a.retries != nil {
				_ = a.retries.Unsubscribe()
			}
			return nil, fmt.Errorf("mcpserver: following the servers' notifications: %w", err)
		}
		a.wg.Add(1)
		go func() { defer a.wg.Done(); a.renewSubscriptions(wctx) }()
	}
	toolsReady, statusReady := make(chan struct{}), make(chan struct{})
	a.wg.Add(3)
	if opts.Agent != "" {
		close(statusReady)
		go func() { defer a.wg.Done(); a.followAgent(wctx, toolsReady) }()
		a.wg.Done()
	} else {
		go func() {
			defer a.wg.Done()
			watchKV(wctx, a.log, nc, tools, decodeJSON[model.Catalog], a.applyCatalogs, toolsReady)
		}()
		go func() {
			defer a.wg.Done()
			watchKV(wctx, a.log, nc, status, decodeJSON[model.Status], a.applyStatus, statusReady)
		}()
	}
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

// Close stops the catalog watch and ends every session.
func (a *Aggregator) Close() {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return
	}
	a.closed = true // viewFor refuses new views from now on
	views := slices.Collect(maps.Values(a.views))
	a.mu.Unlock()
	if a.retries != nil {
		_ = a.retries.Unsubscribe()
	}
	for _, sub := range a.notices {
		_ = sub.Unsubscribe()
	}
	a.cancel()
	a.wg.Wait()
	a.sessions.closeAll(views)
	a.held.cancel(func(*heldCall) bool { return true })
	a.pushes.close()
}
