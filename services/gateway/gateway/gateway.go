// Package gateway composes the HTTP edge of mcpbus: the aggregated MCP
// endpoint (/mcp), the REST API (/mcp/tools, /mcp/invoke, /api/v1/…,
// /api/v1/chat/…), the OpenAI-compatible chat (/v1/chat/completions,
// /v1/models), health probes, and around them API-key auth, per-key rate
// limits, request size limits, CORS and an access log. It talks to the rest
// of the system only through the bus.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/cors"
	"go.opentelemetry.io/otel"

	"github.com/mcpbus/mcpbus/libs/approvals"
	"github.com/mcpbus/mcpbus/libs/audit"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/lostreplies"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/runnerwatch"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
	"github.com/mcpbus/mcpbus/services/gateway/auth/jwtauth"
	"github.com/mcpbus/mcpbus/services/gateway/console"
	"github.com/mcpbus/mcpbus/services/gateway/internal/gwaudit"
	"github.com/mcpbus/mcpbus/services/gateway/internal/httpmetrics"
	"github.com/mcpbus/mcpbus/services/gateway/mcpserver"
	"github.com/mcpbus/mcpbus/services/gateway/oauthflow"
	"github.com/mcpbus/mcpbus/services/gateway/openai"
	"github.com/mcpbus/mcpbus/services/gateway/rest"
)

// Defaults of Options.
const (
	DefaultAddr            = "127.0.0.1:8080"
	DefaultMaxBodyBytes    = 1 << 20
	DefaultShutdownTimeout = 10 * time.Second
	DefaultRequestTimeout  = 2 * time.Minute
	DefaultBodyTimeout     = 30 * time.Second
)

// Options configure the gateway; zero values take the defaults.
type Options struct {
	// Addr is where to listen (default 127.0.0.1:8080; port 0 picks one).
	Addr   string
	Prefix string
	Logger *slog.Logger
	// MayPublish turns on the in-process hand-off of tool calls to a runner
	// in this process (client.Options.MayPublish); Build sets it.
	MayPublish func(subject string) bool
	// DataDir holds admin.key (required unless NoAuth).
	DataDir string
	// NoAuth turns authentication off: every request is auth.Anonymous().
	NoAuth bool
	// RateRPS and RateBurst are the default per-key token bucket (20, 40).
	RateRPS   float64
	RateBurst int
	// MaxBodyBytes limits request bodies (default 1 MiB; larger is a 413).
	MaxBodyBytes int64
	// CORSOrigins are the browser origins allowed to call the gateway
	// (default none: no CORS headers at all). "*" allows any origin.
	CORSOrigins []string
	// MCP configures the aggregated endpoint (Prefix and Logger are filled in).
	MCP mcpserver.Options
	// CallTimeout bounds a tool call of POST /mcp/invoke (default: MCP's, else 35s).
	CallTimeout time.Duration
	// Replicas of the API key bucket and the shared assets (1 embedded, 3 on a cluster).
	Replicas int
	// EventsMaxBytes and AuditMaxBytes bound the shared streams
	// (bus.AssetOptions; 0: the defaults; mcpbus up sets them from its NATS
	// storage).
	EventsMaxBytes, AuditMaxBytes int64
	// RequestTimeout bounds one non-streaming request (default 2m).
	RequestTimeout time.Duration
	// BodyTimeout bounds the read of a request's body, from the request's
	// arrival (default 30s): a body not in by then is refused (400).
	BodyTimeout time.Duration
	// ShutdownTimeout bounds the graceful shutdown (default 10s).
	ShutdownTimeout time.Duration
	// EventHeartbeat is the keep-alive interval of /api/v1/events (default 15s).
	EventHeartbeat time.Duration
	// MaxEventStreams bounds the event streams one key holds open (default 64).
	MaxEventStreams int
	// ChatTurnTimeout bounds one turn of POST /v1/chat/completions
	// (default openai.DefaultTurnTimeout); the turn is cancelled past it.
	ChatTurnTimeout time.Duration
	// AuthFailures is how many failed authentications (401s) one client
	// address (with a known key id: one address and key id) may make in a
	// minute; beyond, it gets 429 with Retry-After until its bucket refills
	// (default 10; negative: no limit).
	AuthFailures int
	// TrustedProxies are the CIDRs of reverse proxies whose X-Forwarded-For
	// or Forwarded names the client address (default none: the direct peer
	// is the client).
	TrustedProxies []string
	// JaegerURL is the base URL of the Jaeger UI the console links traces
	// to (<url>/trace/<id>); empty: no links.
	JaegerURL string
	// OAuth makes the gateway an OAuth protected resource: access tokens
	// (JWT) of its issuers are accepted beside API keys, and the RFC 9728
	// metadata is served (default: no issuer, API keys only).
	OAuth jwtauth.Options
	// TokenRevocationTTL is how long a revoked access token stays refused
	// (default jwtauth.DefaultRevocationTTL): at least the longest token
	// lifetime of the issuers.
	TokenRevocationTTL time.Duration
	// PublicURL is the base URL browsers reach the gateway at; the OAuth
	// redirect URI is PublicURL + /oauth/callback (default http://<Addr>,
	// with the port actually bound).
	PublicURL string
	// RemoteOAuth configures the authorization flows of remote servers (Prefix,
	// Logger and CallbackURL are filled in).
	RemoteOAuth oauthflow.Options
	// Audit is the writer of the gateway's audit chain (Build makes it from
	// the gateway's identity; nil: its events are published, not chained).
	// New owns it: Close closes it.
	Audit *audit.Writer
	// AuditKeysFile holds the writers' public keys as mcpbus identities
	// prints them, for GET /api/v1/audit/verify; AuditKeys are those keys
	// (Build reads the file, or on a shared host the seeds of
	// <data dir>/nats). None: the endpoint answers SERVICE_UNAVAILABLE.
	AuditKeysFile string
	AuditKeys     audit.Keys
}

// Gateway is a configured HTTP edge, listening once New returns.
type Gateway struct {
	opts    Options
	log     *slog.Logger
	nc      *nats.Conn
	ln      net.Listener
	srv     *http.Server
	handler http.Handler

	keys *auth.KeyStore
	// approvals holds tool calls the approval rules ask about (every front door).
	approvals *approvals.Store
	revoked   *jwtauth.Revocations
	tokens    *jwtauth.Verifier
	tokStop   context.CancelFunc
	keysSvc   micro.Service
	audit     *gwaudit.Recorder
	proxies   auth.Proxies
	limiter   *auth.Limiter
	metrics   *httpmetrics.Metrics
	api       *rest.API
	oai       *openai.API
	mcp       *mcpserver.Aggregator
	mcpStop   context.CancelFunc
	oauth     *oauthflow.Flows
	routes    []Route
	console   *console.Console
	adminKey  string
	created   bool
	ready     chan struct{}

	drain drain // the requests in flight, for a graceful shutdown

	closeOnce sync.Once
	bg        sync.WaitGroup // loops that end with mcpStop
}

// Route is one endpoint the gateway serves.
type Route struct {
	Method  string
	Pattern string
}

// New prepares everything (shared assets, the key bucket, the admin key, the
// catalog watches, the keys service on the bus) and binds the listener, so
// Addr is known. Run serves.
func New(ctx context.Context, nc *nats.Conn, opts Options) (_ *Gateway, err error) {
	if opts.Addr == "" {
		opts.Addr = DefaultAddr
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = DefaultShutdownTimeout
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = DefaultBodyTimeout
	}
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = opts.MCP.CallTimeout
	}
	if opts.Replicas <= 0 {
		opts.Replicas = 1
	}
	// The console appends /trace/<id>.
	opts.JaegerURL = strings.TrimRight(opts.JaegerURL, "/")
	if !opts.NoAuth && opts.DataDir == "" {
		return nil, errors.New("gateway: a data dir is required for the admin key (or turn auth off)")
	}
	if opts.NoAuth && opts.OAuth.Enabled() {
		return nil, errors.New("gateway: --oauth-issuer needs authentication on (it is off with --no-auth)")
	}
	if opts.OAuth.Logger == nil {
		opts.OAuth.Logger = opts.Logger
	}
	proxies, err := auth.ParseProxies(opts.TrustedProxies)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	g := &Gateway{opts: opts, log: opts.Logger, nc: nc, proxies: proxies, ready: make(chan struct{}),
		audit: gwaudit.New(nc, opts.Prefix, opts.Audit, opts.Logger)}
	defer func() {
		if err != nil {
			g.Close()
		}
	}()

	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("gateway: jetstream: %w", err)
	}
	// Setup waits for JetStream as long as ctx allows (a fresh cluster
	// elects its leaders first).
	setup := ctx
	assets, err := bus.EnsureAssets(setup, js, bus.NewSubjects(opts.Prefix), bus.AssetOptions{Replicas: opts.Replicas, Logger: g.log,
		EventsMaxBytes: opts.EventsMaxBytes, AuditMaxBytes: opts.AuditMaxBytes})
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	if g.keys, err = auth.OpenKeyStore(setup, js, auth.StoreOptions{Replicas: opts.Replicas, Logger: g.log}); err != nil {
		return nil, err
	}
	if g.revoked, err = jwtauth.OpenRevocations(setup, js, jwtauth.RevocationOptions{Replicas: opts.Replicas, TTL: opts.TokenRevocationTTL, Logger: g.log, Audit: g.audit}); err != nil {
		return nil, err
	}
	opts.OAuth.Revoked = g.revoked
	if g.keysSvc, err = auth.AddKeysService(nc, g.keys, opts.Prefix, g.log, g.audit); err != nil {
		return nil, err
	}
	if err := jwtauth.AddRevokeEndpoint(g.keysSvc, g.revoked, opts.Prefix, g.log); err != nil {
		return nil, err
	}
	if !opts.NoAuth {
		if g.adminKey, g.created, err = auth.EnsureAdminKey(setup, g.keys, opts.DataDir); err != nil {
			return nil, err
		}
	}
	// The aggregate's watches (and the approval rules') live as long as
	// the gateway, not the setup.
	mctx, mstop := context.WithCancel(context.WithoutCancel(ctx))
	g.mcpStop = mstop
	// A call whose runner dies ends when its heartbeat goes, not at the
	// call's timeout.
	runners := runnerwatch.New()
	g.bg.Go(func() { runners.Follow(mctx, nc, assets.Owners, g.log) })
	// A call whose reply a drop of the connection lost ends once its event
	// is found, not at the call's timeout.
	lost, err := lostreplies.New(nc, opts.Prefix, g.log)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	g.bg.Go(func() { lost.Run(mctx) })
	tie := client.Ties(runners.Tie, lost.Tie)
	if g.approvals, err = approvals.Open(mctx, setup, nc, approvals.Options{Replicas: opts.Replicas, Logger: g.log, Audit: g.audit, LeaveForBus: true}); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	if err := g.approvals.AddEndpoints(g.keysSvc, opts.Prefix, g.log); err != nil {
		return nil, err
	}
	if g.api, err = rest.New(setup, nc, rest.Options{Prefix: opts.Prefix, Logger: g.log, MayPublish: opts.MayPublish, Tie: tie,
		CallTimeout: opts.CallTimeout, Heartbeat: opts.EventHeartbeat, MaxStreams: opts.MaxEventStreams, JaegerURL: opts.JaegerURL,
		Keys: g.keys, Approvals: g.approvals, Audit: g.audit, AuditKeys: opts.AuditKeys}); err != nil {
		return nil, err
	}
	g.oai = openai.New(nc, openai.Options{Prefix: opts.Prefix, Logger: g.log, TurnTimeout: opts.ChatTurnTimeout,
		Heartbeat: opts.EventHeartbeat})
	mo := opts.MCP
	mo.Prefix, mo.Logger, mo.NoAuth, mo.Approvals, mo.MayPublish, mo.Tie = opts.Prefix, g.log, opts.NoAuth, g.approvals, opts.MayPublish, tie
	if g.mcp, err = mcpserver.New(mctx, nc, mo); err != nil {
		return nil, err
	}
	// The issuers' JWK Sets refresh as long as the gateway lives.
	tctx, tstop := context.WithCancel(context.WithoutCancel(ctx))
	g.tokStop = tstop
	if g.tokens, err = jwtauth.New(tctx, opts.OAuth); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	g.keys.OnRevoke(g.mcp.DropKey)
	g.keys.OnRevoke(g.api.DropKey)
	g.keys.OnRevoke(g.oai.DropKey)
	if g.ln, err = net.Listen("tcp", opts.Addr); err != nil {
		return nil, fmt.Errorf("gateway: listening on %s: %w", opts.Addr, err)
	}
	oo := opts.RemoteOAuth
	oo.Prefix, oo.Logger, oo.Replicas, oo.Audit = opts.Prefix, g.log, opts.Replicas, g.audit
	oo.CallbackURL = strings.TrimRight(opts.PublicURL, "/") + oauthflow.CallbackPath
	if opts.PublicURL == "" {
		oo.CallbackURL = "http://" + g.ln.Addr().String() + oauthflow.CallbackPath
	}
	if g.oauth, err = oauthflow.New(setup, nc, oo); err != nil {
		return nil, err
	}
	g.keys.OnRevoke(g.oauth.DropKey)
	g.revoked.OnRevoke(func(rv model.TokenRevocation) {
		if rv.Kind == model.RevokeSub { // a jti names no principal
			g.oauth.DropSubject(rv.Issuer, rv.Value)
		}
	})
	if err := g.oauth.AddEndpoint(g.keysSvc, g.log); err != nil {
		return nil, err
	}
	g.api.SetOAuth(g.oauth)
	g.mcp.SetAuthorizer(g.oauth)
	g.api.SetRevoker(g.revoked)
	g.revoked.OnStored(func(rv model.TokenRevocation) {
		// A subject's tokens revoked: its held calls are denied, as a
		// revoked key's are (a jti is one token; the subject acts on).
		if rv.Kind == model.RevokeSub {
			go g.api.DropSubject(rv.Issuer, rv.Value)
		}
	})
	g.metrics = httpmetrics.New(otel.GetMeterProvider())
	g.limiter = auth.NewLimiter(auth.LimiterOptions{RPS: opts.RateRPS, Burst: opts.RateBurst, OnRefuse: g.metrics.RateLimited})
	g.handler = g.buildHandler()
	g.srv = &http.Server{
		Handler:           g.handler,
		ReadHeaderTimeout: 10 * time.Second,
		// No ReadTimeout or WriteTimeout: /mcp and the event stream stay open
		// for long. Bodies and non-streaming replies get per-request
		// deadlines in limits().
		IdleTimeout:    2 * time.Minute,
		MaxHeaderBytes: 64 << 10,
		ErrorLog:       slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
	}
	return g, nil
}

// buildHandler registers the routes (the API's and the console's) and wraps
// them in the middleware, outer to inner: the HTTP server span, request
// metrics, the client address (--trusted-proxy; also the span's client.address), access log, panic recovery, the Host check (DNS rebinding), CORS
// (so preflights need no key), the Origin and Content-Type checks of
// state-changing requests (with or without auth), auth (with its throttle of
// failed attempts), rate limit, body limit and deadlines.
func (g *Gateway) buildHandler() http.Handler {
	mux := http.NewServeMux()
	add := func(method, pattern string, h http.Handler) {
		mux.Handle(method+" "+pattern, namedRoute(method, pattern, h))
		g.routes = append(g.routes, Route{Method: method, Pattern: pattern})
	}
	add("GET", "/healthz", http.HandlerFunc(g.healthz))
	add("GET", "/readyz", http.HandlerFunc(g.readyz))
	mcpH := g.mcp.Handler()
	for _, m := range []string{"POST", "GET", "DELETE"} {
		add(m, "/mcp", mcpH)
	}
	for _, r := range g.api.Routes() {
		add(r.Method, r.Pattern, r.Handler())
	}
	for _, r := range g.oai.Routes() {
		add(r.Method, r.Pattern, r.Handler)
	}
	// The OAuth redirect URI: public (the browser carries no key), bound
	// to a flow by its state. Not in g.routes: the browser's, not the API's.
	mux.Handle("GET "+oauthflow.CallbackPath, namedRoute("GET", oauthflow.CallbackPath, http.HandlerFunc(g.oauth.Callback)))
	// The web console: public pages (its API calls carry the key). Not in
	// g.routes: those are the API, which openapi.json describes.
	con := console.Handler()
	g.console = con
	for _, p := range []string{"/{$}", "/assets/{file...}", "/favicon.ico"} {
		mux.Handle("GET "+p, namedRoute("GET", p, con))
	}

	h := consoleFallback(mux, con, contractErrors(mux))
	h = g.limits(h)
	h = g.limiter.Middleware(h)
	var failures *auth.Limiter
	if g.opts.AuthFailures >= 0 {
		failures = auth.NewFailureLimiter(g.opts.AuthFailures)
	}
	ao := auth.MiddlewareOptions{Store: g.keys, NoAuth: g.opts.NoAuth, Logger: g.log, Failures: failures,
		OnThrottle: g.metrics.AuthThrottled}
	if g.tokens != nil {
		ao.Tokens = g.tokens
	}
	h = auth.Middleware(ao)(h)
	h = writeGuard(g.opts.CORSOrigins, h)
	if len(g.opts.CORSOrigins) > 0 {
		h = cors.New(cors.Options{
			AllowedOrigins: g.opts.CORSOrigins,
			AllowedMethods: []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete},
			AllowedHeaders: []string{"Authorization", "Content-Type", "Accept", "Last-Event-ID",
				"Mcp-Session-Id", "Mcp-Protocol-Version"},
			ExposedHeaders: []string{"Mcp-Session-Id", "Retry-After", "WWW-Authenticate", "Location", openai.ConversationHeader},
			MaxAge:         600,
		}).Handler(h)
	}
	h = g.resourceMetadata(h)
	h = hostGuard(g.opts.NoAuth, g.opts.PublicURL, h)
	h = g.drain.middleware(h)
	h = openai.Errors(h) // every refusal of /v1 as an OpenAI error object
	h = recoverer(g.log, h)
	return g.bodyDeadline(traceHTTP(g.metrics.Middleware(mux, g.proxies.Middleware(clientAddress(accessLog(g.log, h))))))
}

// resourceMetadata serves the RFC 9728 document (with --oauth-issuer) to
// anyone, before CORS and auth: it is public, and browser clients (the MCP
// Inspector) fetch it from their own origin. Without an issuer nothing is
// served there (404): a document naming no authorization server would only
// send OAuth clients down a flow that cannot succeed, while the plain 401
// tells them to send an API key.
func (g *Gateway) resourceMetadata(next http.Handler) http.Handler {
	if g.tokens == nil {
		return next
	}
	doc := g.tokens.MetadataHandler()
	paths := g.tokens.MetadataPaths()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if (r.Method == http.MethodGet || r.Method == http.MethodOptions) && slices.Contains(paths, r.URL.Path) {
			doc.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// consoleFallback gives the console's page to a browser navigating to a
// path no route takes outside the API (the app's own links), and leaves the
// rest, API paths always, to next (404/405 in the error contract). A
// catch-all "GET /" route instead would shadow the 405 of API routes.
func consoleFallback(mux *http.ServeMux, con *console.Console, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if con.Fallback(r) {
			if _, pattern := mux.Handler(r); pattern == "" {
				con.ServeHTTP(w, r)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// Routes lists every API endpoint (the OpenAPI document describes exactly
// these); the console's pages (/, /assets/, /favicon.ico) are not among them.
func (g *Gateway) Routes() []Route { return g.routes }

// Handler is the whole HTTP handler, middleware included.
func (g *Gateway) Handler() http.Handler { return g.handler }

// Addr is the address the gateway listens on (the real port when 0 was asked).
func (g *Gateway) Addr() string { return g.ln.Addr().String() }

// AdminKeyPath is the admin key file ("" with auth off).
func (g *Gateway) AdminKeyPath() string { return g.adminKey }

// AdminKeyCreated reports whether New wrote a new admin key (first start).
func (g *Gateway) AdminKeyCreated() bool { return g.created }

// Keys is the API key store.
func (g *Gateway) Keys() *auth.KeyStore { return g.keys }

// HeldCalls is the store of the calls held for approval: a decision made
// through it (DenyCallsOf, ForgetCallsOf of mcpbus up's host) is recorded
// in the gateway's audit trail as the gateway's own are.
func (g *Gateway) HeldCalls() *approvals.Store { return g.approvals }

// Ready is closed once Run serves.
func (g *Gateway) Ready() <-chan struct{} { return g.ready }

// Run serves until ctx ends, then shuts down gracefully within
// ShutdownTimeout and releases everything.
func (g *Gateway) Run(ctx context.Context) error {
	defer g.Close()
	if g.opts.NoAuth {
		g.log.Warn("AUTHENTICATION IS OFF (--no-auth): anyone who can reach " + g.Addr() +
			" may call every tool and change every server; use it for local experiments only")
		if tcp, ok := g.ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() {
			g.log.Warn("AUTHENTICATION IS OFF on a non-loopback address", "addr", g.Addr())
		}
	}
	g.log.Info("gateway listening", "addr", g.Addr(), "auth", !g.opts.NoAuth, "admin_key_file", g.adminKey)
	served := make(chan error, 1)
	go func() { served <- g.srv.Serve(g.ln) }()
	// The listener is bound since New: connections queue until Serve takes them.
	close(g.ready)
	select {
	case err := <-served:
		return fmt.Errorf("gateway: serving: %w", err)
	case <-ctx.Done():
	}
	g.log.Info("gateway stopping")
	sctx, cancel := context.WithTimeout(context.Background(), g.opts.ShutdownTimeout)
	defer cancel()
	// Event streams never end by themselves: end them first.
	g.api.StopStreams()
	done := make(chan error, 1)
	go func() { done <- g.srv.Shutdown(sctx) }()
	// The calls and chat completions in flight (and the multi round-trip
	// calls held for their clients' next round, whose retries may come
	// through another instance) finish first, for three quarters of the time
	// at most; then the completions left are cancelled (with their turns),
	// the MCP sessions close, which ends their streams, and the rest gets
	// the remaining time.
	wctx, wcancel := context.WithTimeout(sctx, g.opts.ShutdownTimeout*3/4)
	g.drain.wait(wctx, func() bool { return g.mcp.HeldCalls() > 0 })
	wcancel()
	g.oai.Stop()
	g.mcp.Close()
	err := <-done
	if err != nil {
		g.log.Warn("gateway shutdown timed out; closing the remaining connections", "error", err)
		_ = g.srv.Close()
	}
	<-served
	return nil
}

// Close releases everything New set up (Run calls it; call it yourself only
// when Run is never called). It is safe to call more than once.
func (g *Gateway) Close() {
	g.closeOnce.Do(func() {
		if g.ln != nil {
			_ = g.ln.Close()
		}
		if g.oauth != nil {
			g.oauth.Close()
		}
		if g.mcp != nil {
			g.mcp.Close()
		}
		if g.mcpStop != nil {
			g.mcpStop()
		}
		g.bg.Wait()
		if g.tokStop != nil {
			g.tokStop()
		}
		if g.api != nil {
			g.api.Close()
		}
		if g.keysSvc != nil {
			_ = g.keysSvc.Stop()
		}
		if g.keys != nil {
			g.keys.Close()
		}
		if g.revoked != nil {
			g.revoked.Close()
		}
		// Last: what the parts above recorded while stopping is written.
		g.audit.Close(2 * time.Second)
	})
}
