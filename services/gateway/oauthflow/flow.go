// Package oauthflow authorizes mcpbus with the OAuth-protected remote (Streamable
// HTTP) MCP servers, as the MCP authorization specification (2025-11-25)
// describes: the upstream's 401 challenge leads to its protected resource
// metadata (RFC 9728) and its authorization server's metadata (RFC 8414 or
// OpenID discovery); the client registers dynamically (RFC 7591) unless the
// server's config names a client id, once per server and issuer, kept and
// reused by every flow (registrar.go); the user approves in a browser with
// the authorization-code flow (PKCE S256, state, resource indicator RFC
// 8707), which comes back to the gateway's callback route. All of that is
// go-sdk's auth.AuthorizationCodeHandler; this package gives it the
// callback, the pending flows, the 2-minute limit, and hands the tokens to
// the credential service (sealed, through config.update, which also marks
// the server auth_type oauth) before restarting the server.
package oauthflow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/oauth2"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/netguard"
	"github.com/mcpbus/mcpbus/libs/principal"
	"github.com/mcpbus/mcpbus/services/gateway/internal/gwaudit"
)

// CallbackPath is the gateway's redirect URI path.
const CallbackPath = "/oauth/callback"

// DefaultTimeout is how long a flow waits for the user (the product's
// "Authorization timed out after 2 minutes.").
const DefaultTimeout = 2 * time.Minute

// Options configure the flows.
type Options struct {
	Prefix string
	Logger *slog.Logger
	// CallbackURL is the redirect URI the authorization server sends the
	// browser back to: the gateway's public base URL + CallbackPath.
	CallbackURL string
	// Timeout bounds a whole flow, the user's approval included (default
	// 2 min; tests shorten it).
	Timeout time.Duration
	// RequestTimeout bounds each request of a flow to the protected
	// resource's and the authorization server's endpoints (metadata
	// discovery, client registration, the token exchange), its answer's
	// body included (default DefaultRequestTimeout; tests shorten it).
	RequestTimeout time.Duration
	// HTTPClient makes the probe, discovery, registration and token
	// requests (default: Go's). For a server outside the operator's network
	// (Guard.Inside), it is guarded: its authorization server, named by the
	// server's own metadata, must be outside too.
	HTTPClient *http.Client
	// Guard tells internal addresses (tests name their own).
	Guard netguard.Guard
	// Replicas of the bucket of pending flows (1 embedded, 3 on a cluster).
	Replicas int
	// Audit records flows started and chains their outcomes (nil: not recorded).
	Audit *gwaudit.Recorder
}

// Flows are the authorization flows under way in this gateway.
type Flows struct {
	opts    Options
	log     *slog.Logger
	nc      *nats.Conn
	subj    bus.Subjects
	client  *client.Client
	kv      jetstream.KeyValue   // the flows waiting for their callback, of every instance
	creds   *credclient.Resolver // reads confidential clients' secrets (cred.oauthclient)
	secrets *credclient.Client   // stores a principal's own tokens (cred.set, sealed)

	mu     sync.Mutex
	flows  map[string]*flow         // by server and principal (flowKey): one flow each
	regs   map[string]chan struct{} // by server id: the lock of its client registration (regLock)
	wg     sync.WaitGroup
	closed bool
}

// flow is one authorization under way.
type flow struct {
	server    string
	principal string // "": the server's own authorization
	starter   string // the bus principal who started it (DropKey)
	bind      bool   // completes only in the browser the principal continued it in (binding.go)
	cancel    context.CancelFunc
	outcome   chan error // the flow's end, once (the callback page waits for it)
	// What the token exchange gave (go-sdk's NewTokenSource hook).
	conf  *oauth2.Config
	token *oauth2.Token
	// Under Flows.mu: the URL once known (for Prompt), and who waits for
	// the outcome.
	reply    model.OAuthStartReply
	watchers []func(error)
	// noAnswer: a request of the flow ran past Options.RequestTimeout.
	noAnswer atomic.Bool
	// registered is the id of the dynamically registered client the flow
	// uses, kept or new (set by its registrar, in go-sdk's Authorize).
	registered string
	// Under mu: the provider's URL, and a per-principal flow's binding
	// (the SHA-256 of its latest continue's cookie; binding.go).
	mu      sync.Mutex
	authURL string
	binding []byte
}

// New prepares the flows of a gateway whose callback is opts.CallbackURL,
// creating the bucket of pending flows if needed.
func New(ctx context.Context, nc *nats.Conn, opts Options) (*Flows, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	if opts.Timeout > flowsTTL {
		return nil, fmt.Errorf("oauthflow: a flow's timeout (%s) must be under %s", opts.Timeout, flowsTTL)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	kv, err := openFlows(ctx, nc, opts)
	if err != nil {
		return nil, err
	}
	creds, err := credclient.NewResolver(nc, opts.Prefix)
	if err != nil {
		return nil, fmt.Errorf("oauthflow: %w", err)
	}
	return &Flows{opts: opts, log: opts.Logger, nc: nc, subj: bus.NewSubjects(opts.Prefix),
		client: client.New(nc, client.Options{Prefix: opts.Prefix}), kv: kv, creds: creds, secrets: credclient.New(nc, opts.Prefix),
		flows: map[string]*flow{}, regs: map[string]chan struct{}{}}, nil
}

// Close cancels every flow under way and waits for them.
func (f *Flows) Close() {
	f.mu.Lock()
	f.closed = true
	for _, fl := range f.flows {
		fl.cancel()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// DropKey cancels the flows the API key keyID started, or that would
// authorize it (the KeyStore's OnRevoke, on every instance): the callback
// needs no key, so a revoked admin key's pending flow would otherwise still
// make its holder's upstream account the server's own.
func (f *Flows) DropKey(keyID string) {
	id := principal.Key(keyID, false, model.ToolFilter{}).ID
	f.drop(func(p string) bool { return p == id }, "its API key was revoked")
}

// DropSubject is DropKey for the access tokens of subject of issuer (of
// every issuer when ""), revoked with `mcpbus tokens revoke --sub`.
func (f *Flows) DropSubject(issuer, subject string) {
	f.drop(func(p string) bool {
		rest, ok := strings.CutPrefix(p, principal.KindOAuth+":")
		// An issuer identifier has no '#': the first one ends it.
		iss, sub, found := strings.Cut(rest, "#")
		return ok && found && sub == subject && (issuer == "" || iss == issuer)
	}, "its access tokens were revoked")
}

// drop cancels the flows whose starter or principal matches.
func (f *Flows) drop(match func(principal string) bool, why string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, fl := range f.flows {
		if match(fl.starter) || (fl.principal != "" && match(fl.principal)) {
			f.log.Info("cancelling an OAuth flow: "+why, "server", fl.server)
			fl.cancel()
		}
	}
}

// Start begins authorizing server (slug or id) — for principal alone when
// not "" (a server with auth.per_principal; the principal's own request,
// so the flow completes only in their browser: binding.go), else the
// server's own authorization: it checks that the server is remote and asks
// for authorization, then runs the flow in the background and returns the
// URL for the user's browser as soon as go-sdk has built it. The outcome
// is published as an OAuthEvent on events.oauth.<server>. Starting again
// cancels the same server's and principal's earlier flow.
func (f *Flows) Start(ctx context.Context, ref, principal string) (model.OAuthStartReply, error) {
	return f.StartNotify(ctx, ref, principal, nil)
}

// StartFor is Start by the operator (mcp.v1.oauth.start: `mcpbus servers
// auth --principal`) for principal, who may have no browser session to
// prove (an agent): the provider's URL, bound by state alone, which the
// operator hands to whoever is to approve.
func (f *Flows) StartFor(ctx context.Context, ref, principal string) (model.OAuthStartReply, error) {
	return f.start(ctx, ref, principal, false, nil)
}

// promptMargin is how long before its expiry a pending flow's URL is still
// handed out again by Prompt.
const promptMargin = 20 * time.Second

// Prompt is StartNotify that hands out this instance's pending flow of the
// server (slug) and principal while its URL is good for promptMargin more,
// instead of replacing it: an MCP client that calls again before its user
// approved must not void the URL it was given.
func (f *Flows) Prompt(ctx context.Context, server, principal string, done func(error)) (model.OAuthStartReply, error) {
	if principal == model.PrincipalOperator {
		principal = ""
	}
	f.mu.Lock()
	if fl := f.flows[flowKey(server, principal)]; fl != nil && fl.reply.AuthorizationURL != "" && time.Until(fl.reply.ExpiresAt) > promptMargin {
		if done != nil {
			fl.watchers = append(fl.watchers, done)
		}
		reply := fl.reply
		f.mu.Unlock()
		return reply, nil
	}
	f.mu.Unlock()
	return f.StartNotify(ctx, server, principal, done)
}

// StartNotify is Start that also calls done (when not nil) with the flow's
// outcome (nil: authorized) once it ends, from the flow's goroutine.
func (f *Flows) StartNotify(ctx context.Context, ref, forID string, done func(error)) (model.OAuthStartReply, error) {
	return f.start(ctx, ref, forID, true, done)
}

// start is Start; bind: a per-principal flow completes only in the browser
// that continued it signed in as the principal.
func (f *Flows) start(ctx context.Context, ref, forID string, bind bool, done func(error)) (model.OAuthStartReply, error) {
	if strings.TrimSpace(ref) == "" {
		return model.OAuthStartReply{}, apierr.Invalid("server", "server is required")
	}
	if forID == model.PrincipalOperator {
		forID = "" // the operator's is the server's own
	}
	cfg, err := f.client.GetConfig(ctx, ref)
	if err != nil {
		return model.OAuthStartReply{}, err
	}
	if cfg.Transport.Type != model.TransportHTTP {
		return model.OAuthStartReply{}, apierr.Invalid("transport.type", "OAuth authorization is for remote (http) servers; "+cfg.Slug+" runs over stdio")
	}
	if forID != "" && !cfg.Auth.PerPrincipal {
		return model.OAuthStartReply{}, apierr.Invalid("auth.per_principal", cfg.Slug+" does not take per-principal credentials (auth.per_principal is off): an admin authorizes it for everyone")
	}
	secret, err := f.clientSecret(ctx, &cfg)
	if err != nil {
		return model.OAuthStartReply{}, err
	}
	hc := f.opts.HTTPClient
	if cfg.FromRegistry() || !f.opts.Guard.Inside(ctx, cfg.Transport.URL) {
		// A public server's metadata must not aim the gateway's requests
		// (a registration, a token exchange: POSTs) at the host or its
		// network; nor may a registry's entry (someone else's word), which
		// the runner reaches at public addresses only, whatever its name
		// resolves to.
		hc = f.opts.Guard.Client(hc)
	} else {
		// A server inside the operator's network may have its authorization
		// server there too: a transport of our own opts out of go-sdk's
		// refusal of private addresses for discovery. Its own connections
		// must stay inside: a public server whose DNS answered Inside with
		// internal addresses and answers the probe with its own (DNS
		// rebinding) is refused.
		if hc == nil {
			hc = &http.Client{Transport: http.DefaultTransport}
		}
		if u, err := url.Parse(cfg.Transport.URL); err == nil {
			hc = f.opts.Guard.Within(hc, u.Hostname())
		}
	}
	req, resp, err := f.probe(ctx, &cfg, hc)
	if err != nil {
		return model.OAuthStartReply{}, err
	}
	fctx, cancel := context.WithTimeout(context.Background(), f.opts.Timeout)
	expires := time.Now().Add(f.opts.Timeout).UTC()
	fl := &flow{server: cfg.Slug, principal: forID, starter: principal.Actor(ctx), bind: bind && forID != "", cancel: cancel, outcome: make(chan error, 1)}
	if done != nil {
		fl.watchers = []func(error){done}
	}
	key := flowKey(cfg.Slug, forID)
	urls := make(chan string, 1)
	client := bounded(hc, f.opts.RequestTimeout, &fl.noAnswer)
	var reg *registrar
	if o := cfg.Transport.OAuth; o == nil || o.ClientID == "" {
		// Dynamic registration: one client per server and issuer (registrar.go).
		reg = &registrar{f: f, cfg: &cfg, fl: fl, next: client.Transport, hc: client}
		withReg := *client
		withReg.Transport = reg
		client = &withReg
	}
	h, err := f.handler(&cfg, secret, client, fl, urls)
	if err != nil {
		cancel()
		_ = resp.Body.Close()
		return model.OAuthStartReply{}, apierr.Wrap(apierr.Internal, "setting up the OAuth client", err)
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		cancel()
		_ = resp.Body.Close()
		return model.OAuthStartReply{}, apierr.New(apierr.ServiceUnavailable, "the gateway is stopping")
	}
	if prev := f.flows[key]; prev != nil {
		prev.cancel() // one flow per server and forID: the newest wins
	}
	f.flows[key] = fl
	f.wg.Add(1)
	f.mu.Unlock()
	f.opts.Audit.Record(model.GatewayAuditEvent{Action: model.GatewayOAuthStarted, Principal: principal.Actor(ctx), Server: cfg.Slug, For: forID})
	ended := make(chan error, 1)
	go func() {
		defer f.wg.Done()
		defer cancel()
		err := f.run(fctx, h, reg, &cfg, fl, req, resp)
		f.mu.Lock()
		if f.flows[key] == fl {
			delete(f.flows, key)
		}
		watchers := fl.watchers
		f.mu.Unlock()
		ended <- err
		for _, w := range watchers {
			w(err)
		}
	}()
	select {
	case u := <-urls:
		reply := model.OAuthStartReply{Server: cfg.Slug, Principal: forID, AuthorizationURL: u, ExpiresAt: expires}
		if fl.bind { // the provider's URL only to the starter's own browser (binding.go)
			reply.Flow = flowID(stateOf(u))
			reply.AuthorizationURL = f.continueURL(cfg.Slug, reply.Flow)
		}
		f.mu.Lock()
		fl.reply = reply
		f.mu.Unlock()
		return reply, nil
	case err := <-ended: // discovery or registration failed before any URL
		if err == nil {
			err = apierr.New(apierr.Internal, "the OAuth flow ended without an authorization URL")
		}
		return model.OAuthStartReply{}, err
	case <-ctx.Done():
		cancel()
		return model.OAuthStartReply{}, apierr.Wrap(apierr.Network, "timed out preparing the authorization", ctx.Err())
	}
}

// flowKey names a flow in Flows.flows.
func flowKey(server, principal string) string { return server + "\n" + principal }

// probe sends the upstream an MCP initialize without credentials: a server
// that wants OAuth answers 401 with a WWW-Authenticate challenge, which
// go-sdk's handler starts from.
func (f *Flows) probe(ctx context.Context, cfg *model.McpConfig, hc *http.Client) (*http.Request, *http.Response, error) {
	const body = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"mcpbus","version":"1"}}}`
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(pctx, http.MethodPost, cfg.Transport.URL, strings.NewReader(body))
	if err != nil {
		return nil, nil, apierr.Wrap(apierr.Validation, "bad transport.url", err).WithField("transport.url")
	}
	for k, v := range cfg.Transport.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if hc == nil {
		hc = &http.Client{}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, nil, probeError(cfg, err)
	}
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
		_ = resp.Body.Close()
		return nil, nil, apierr.Newf(apierr.Validation, "%s does not ask for OAuth authorization (HTTP %d without a Bearer challenge)", cfg.Slug, resp.StatusCode).WithField("server")
	}
	// The handler reads the request's URL only (the resource); the probe's
	// deadline must not bound the flow.
	return req.WithContext(context.Background()), resp, nil
}

// probeError is the error of a probe of cfg's server that failed with err:
// a refusal of the guard (start) is the URL's, said as the runner says it
// (VALIDATION_ERROR on transport.url), not an outage to wait out.
func probeError(cfg *model.McpConfig, err error) *apierr.Error {
	if ie, ok := errors.AsType[*netguard.InternalError](err); ok {
		why := "its name also resolves to public addresses, so it is not trusted with your network"
		if cfg.FromRegistry() {
			why = model.MsgRegistryRemoteInternal
		}
		return apierr.Wrap(apierr.Validation, fmt.Sprintf("transport.url reaches an internal address, %s (%s): %s", ie.Address, ie.Class, why), err).WithField("transport.url")
	}
	if errors.Is(err, netguard.ErrLeftInside) {
		return apierr.Wrap(apierr.Validation, "transport.url's host resolved to internal addresses when checked and was reached at a public one: "+
			"a server is trusted with your network only while it stays inside", err).WithField("transport.url")
	}
	return apierr.Wrap(apierr.Network, "could not reach "+cfg.Slug+" to start the authorization", err)
}

// clientSecret reads the secret of cfg's pre-registered client from the
// credential service: "" for a public client (no client id configured, or
// no secret stored for it).
func (f *Flows) clientSecret(ctx context.Context, cfg *model.McpConfig) (string, error) {
	if cfg.Transport.OAuth == nil || cfg.Transport.OAuth.ClientID == "" {
		return "", nil
	}
	secret, err := f.creds.OAuthClientSecret(ctx, cfg.ID)
	if apierr.Of(err) == apierr.NotFound {
		return "", nil
	}
	if err != nil {
		return "", apierr.Wrap(apierr.Of(err), "reading the OAuth client secret of "+cfg.Slug+": "+apierr.From(err).Message, err)
	}
	return secret, nil
}

// handler is go-sdk's authorization-code handler for cfg, with the
// gateway's callback as redirect URI; the URL it builds goes to urls, the
// tokens it gets to fl. With a secret, the pre-registered client is
// confidential: go-sdk sends the secret to the token endpoint with the
// method the authorization server's metadata lists first among
// client_secret_post and client_secret_basic.
func (f *Flows) handler(cfg *model.McpConfig, secret string, client *http.Client, fl *flow, urls chan<- string) (*auth.AuthorizationCodeHandler, error) {
	hc := &auth.AuthorizationCodeHandlerConfig{
		DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{Metadata: &oauthex.ClientRegistrationMetadata{
			RedirectURIs: []string{f.opts.CallbackURL}, ClientName: "mcpbus",
			// A public client: PKCE protects the code, no secret to keep.
			TokenEndpointAuthMethod: "none",
			GrantTypes:              []string{"authorization_code", "refresh_token"},
			ResponseTypes:           []string{"code"},
		}},
		RedirectURL:         f.opts.CallbackURL,
		RequestRefreshToken: true,
		Client:              client,
		AuthorizationCodeFetcher: func(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
			return f.await(ctx, fl, args.URL, urls)
		},
		// The tokens go to the credential service, which refreshes them;
		// the gateway keeps no token source.
		NewTokenSource: func(_ context.Context, c *oauth2.Config, t *oauth2.Token) (oauth2.TokenSource, error) {
			fl.conf, fl.token = c, t
			return oauth2.StaticTokenSource(t), nil
		},
	}
	if o := cfg.Transport.OAuth; o != nil && o.ClientID != "" {
		hc.PreregisteredClient = &oauthex.ClientCredentials{ClientID: o.ClientID}
		if secret != "" {
			hc.PreregisteredClient.ClientSecretAuth = &oauthex.ClientSecretAuth{ClientSecret: secret}
		}
	}
	if o := cfg.Transport.OAuth; o != nil && len(o.Scopes) > 0 {
		hc.ScopeFilter = func([]string) []string { return o.Scopes }
	}
	return auth.NewAuthorizationCodeHandler(hc)
}

// await publishes the flow under its state (for every gateway instance),
// hands the URL on and waits for the callback with that state (or the
// flow's end).
func (f *Flows) await(ctx context.Context, fl *flow, authURL string, urls chan<- string) (*auth.AuthorizationResult, error) {
	state := stateOf(authURL)
	if state == "" {
		return nil, errors.New("authorization URL without a state")
	}
	fl.mu.Lock()
	fl.authURL = authURL
	fl.mu.Unlock()
	deadline, _ := ctx.Deadline()
	got := make(chan model.OAuthCallback, 1)
	stop, err := f.listen(ctx, fl, state, deadline, got)
	if err != nil {
		return nil, apierr.Wrap(apierr.ServiceUnavailable, "could not make the authorization reachable from every gateway", err)
	}
	defer stop()
	urls <- authURL
	select {
	case cb := <-got:
		if cb.Error != "" || cb.Code == "" {
			return nil, errDenied
		}
		return &auth.AuthorizationResult{Code: cb.Code, State: cb.State, Iss: cb.Iss}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

var errDenied = errors.New("the authorization server answered the callback with an error")

// stateOf is the state of a provider's authorization URL ("" if none).
func stateOf(authURL string) string {
	u, err := url.Parse(authURL)
	if err != nil {
		return ""
	}
	return u.Query().Get("state")
}
