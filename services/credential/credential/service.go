package credential

import (
	"context"
	"errors"
	"fmt"
	"github.com/mcpbus/mcpbus/libs/audit"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/credential/store"
	"github.com/mcpbus/mcpbus/services/credential/store/vaultstore"
)

// Version of the credential service (micro requires semver).
const Version = "0.1.0"

// ServiceName is the micro name; it is also the queue group, so several
// instances share the requests.
const ServiceName = "mcpbus-credential"

// Verbs of mcp.v1.cred.<verb>.
const (
	VerbSet      = "set"
	VerbDelete   = "delete"
	VerbDescribe = "describe"
	VerbResolve  = "resolve"
	// VerbKey answers the service's public curve key: writers seal secrets to it.
	VerbKey = "key"
	// VerbRegistry resolves the registry credentials for the registry service.
	VerbRegistry = "registry"
	// VerbChatKey answers the chat service the API key of a chat profile.
	VerbChatKey = credclient.VerbChatKey
	// VerbOAuthClient answers the gateway the client secret of a server's
	// confidential OAuth client.
	VerbOAuthClient = credclient.VerbOAuthClient
	// VerbChatSet, VerbChatDelete and VerbChatDescribe are set, delete and
	// describe of chat profile keys only: the chat identity's.
	VerbChatSet      = credclient.VerbChatSet
	VerbChatDelete   = credclient.VerbChatDelete
	VerbChatDescribe = credclient.VerbChatDescribe
	// verbRefresh names a change made by an OAuth refresh in a change event
	// (no subject has it).
	verbRefresh = "refresh"
)

// Verbs are every verb the service answers.
var Verbs = []string{VerbSet, VerbDelete, VerbDescribe, VerbResolve, VerbKey, VerbRegistry, VerbChatKey, VerbOAuthClient, VerbFingerprints,
	VerbChatSet, VerbChatDelete, VerbChatDescribe, VerbForget}

// Options configure the service. Store, or Backend and what it needs, is required.
type Options struct {
	Prefix string
	// Audit appends the audited events to the service's audit chains (nil:
	// none, on a bus without identities); Build makes it, Run closes it.
	Audit *audit.Writer
	// Store holds the secrets; when nil, Build opens the Backend.
	Store store.Store
	// Backend is file (an encrypted store under <data-dir>/secrets) or vault.
	Backend string
	// Vault configures the vault backend (default: from the environment,
	// as the vault CLI reads it: VAULT_ADDR, VAULT_TOKEN, …).
	Vault  vaultstore.Config
	Logger *slog.Logger
	// Now is the clock for OAuth expiry (default time.Now; tests move it).
	Now func() time.Time
	// HTTPClient talks to OAuth token endpoints (default: 15 s timeout, no
	// redirects followed).
	HTTPClient *http.Client
	// RequestTimeout bounds the work on one request (default 20 s).
	RequestTimeout time.Duration
	// RefreshBefore refreshes an OAuth token that expires within this long (default 1 min).
	RefreshBefore time.Duration
	// KeySettle is how long a new key pair kept in a store other than the
	// file store is left before it is read back (default 1 s; see keys.go).
	KeySettle time.Duration
	// AnyResolver answers cred.resolve without checking that the runner
	// owns the server: for tests of this service alone, never a setting.
	AnyResolver bool
	// MaxFingerprints bounds the fingerprint feed (default and at most
	// model.MaxFingerprints; tests lower it).
	MaxFingerprints int
	// ProbeInterval is how often a backend that can be down (Vault) is asked
	// whether it answers, for readiness (default 5 s).
	ProbeInterval time.Duration
}

func (o *Options) defaults() {
	if o.Prefix == "" {
		o.Prefix = bus.DefaultPrefix
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.HTTPClient == nil {
		// A token endpoint answers; it has no reason to redirect, and a
		// redirect would carry the refresh token wherever it points.
		o.HTTPClient = &http.Client{Timeout: 15 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}}
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 20 * time.Second
	}
	if o.RefreshBefore <= 0 {
		o.RefreshBefore = time.Minute
	}
	if o.KeySettle <= 0 {
		o.KeySettle = time.Second
	}
	if o.MaxFingerprints <= 0 || o.MaxFingerprints > model.MaxFingerprints {
		o.MaxFingerprints = model.MaxFingerprints
	}
	if o.ProbeInterval <= 0 {
		o.ProbeInterval = 5 * time.Second
	}
}

// Service is the credential service.
type Service struct {
	nc    *nats.Conn
	opts  Options
	subj  bus.Subjects
	log   *slog.Logger
	store store.Store
	// keys is the service's xkey pair, shared by every instance (keys.go):
	// writers seal to it, resolve replies are sealed with it.
	keys  *keyRing
	owner ownerCheck
	locks keyedMutex
	// unsaved holds refreshed OAuth tokens the store did not take.
	unsaved unsavedTokens
	ready   chan struct{}
	met     metrics
	// closer releases a store Build opened (nil otherwise).
	closer io.Closer
	// health probes a backend that can be down (nil for the file store).
	health *backendHealth
}

// New prepares the service on nc; Run serves it.
func New(nc *nats.Conn, opts Options) (*Service, error) {
	opts.defaults()
	if nc == nil {
		return nil, errors.New("credential: no NATS connection")
	}
	if opts.Store == nil {
		return nil, errors.New("credential: no store")
	}
	var health *backendHealth
	if p, ok := opts.Store.(store.Pinger); ok {
		health = &backendHealth{p: p, interval: opts.ProbeInterval, timeout: min(opts.ProbeInterval, 3*time.Second)}
	}
	return &Service{
		health: health, met: newMetrics(),
		nc: nc, opts: opts, subj: bus.NewSubjects(opts.Prefix), store: measure(opts.Store),
		log:   opts.Logger.With("backend", opts.Store.Name()),
		keys:  newKeyRing(keyLoader(opts.Store, opts.KeySettle)),
		owner: ownerCheck{nc: nc, skip: opts.AnyResolver},
		locks: keyedMutex{m: map[string]*keyedEntry{}}, ready: make(chan struct{}),
	}, nil
}

// PublicKey is the service's public curve key (writers seal to it; resolve
// replies are sealed with it), loading the pair when needed.
func (s *Service) PublicKey(ctx context.Context) (string, error) {
	_, pub, err := s.keys.get(ctx)
	return pub, err
}

// Ready is closed once the endpoints answer.
func (s *Service) Ready() <-chan struct{} { return s.ready }

// Run serves until ctx ends, then drains the endpoints.
func (s *Service) Run(ctx context.Context) error {
	// Events still queued get a bounded moment to reach their chain.
	defer s.opts.Audit.Close(2 * time.Second)
	handlers := map[string]handler{
		VerbSet: s.handleSet, VerbDelete: s.handleDelete, VerbDescribe: s.handleDescribe, VerbResolve: s.handleResolve,
		VerbKey: s.handleKey, VerbRegistry: s.handleRegistryKey, VerbChatKey: s.handleChatKey,
		VerbOAuthClient: s.handleOAuthClient, VerbFingerprints: s.handleFingerprints,
		VerbChatSet: chatProfileOnly(s.handleSet), VerbChatDelete: chatProfileOnly(s.handleDelete), VerbChatDescribe: chatProfileOnly(s.handleDescribe),
		VerbForget: s.handleForget,
	}
	meta := map[string]string{"backend": s.store.Name()}
	if s.health != nil {
		go s.health.run(ctx)
	}
	// The key pair now, when the store answers (the file store always does:
	// its errors stop the service); else on first use, and cred.key only.
	kctx, kcancel := context.WithTimeout(ctx, 5*time.Second)
	pub, err := s.PublicKey(kctx)
	kcancel()
	switch {
	case err == nil:
		meta["public_key"] = pub
	case s.store.Name() == BackendFile:
		return fmt.Errorf("credential: %w", err)
	default:
		s.log.Warn("the curve key pair is not loaded yet; it will be on first use", "code", apierr.Of(err), "error", apierr.From(err).Message)
	}
	cfg := bus.ServiceConfig{Name: ServiceName, Version: Version,
		Description: "mcpbus credential service: secrets of MCP servers",
		Metadata:    meta}
	for _, verb := range Verbs {
		cfg.Endpoints = append(cfg.Endpoints, bus.Endpoint{Name: verb, Subject: s.subj.Service("cred", verb),
			Handler: bus.JSONHandler(s.log, s.logged(verb, handlers[verb]))})
	}
	svc, err := bus.StartService(s.nc, cfg)
	if err != nil {
		return err
	}
	close(s.ready)
	s.log.Info("credential service started", "prefix", s.subj.Prefix)
	<-ctx.Done()
	err = svc.Stop()
	if s.closer != nil {
		_ = s.closer.Close()
	}
	s.log.Info("credential service stopped")
	return err
}

// handler answers one request body; it returns the server id it was about
// (for the log line) with the reply.
type handler func(ctx context.Context, data []byte) (serverID string, out any, err error)

// logged bounds a request in time and logs its outcome: verb, server id,
// error code and message, never a value (error messages carry no values).
func (s *Service) logged(verb string, h handler) bus.HandlerFunc {
	return func(ctx context.Context, req micro.Request) (any, error) {
		// Within the caller's own deadline, with a margin: a backend that
		// does not answer (a hung Vault) is then reported as such
		// (SERVICE_UNAVAILABLE), not as a request nobody answered.
		ctx, cancel := context.WithTimeout(ctx, bus.ReplyWithin(nats.Header(req.Headers()), s.opts.RequestTimeout))
		defer cancel()
		start := time.Now()
		id, out, err := h(ctx, req.Data())
		attrs := []any{"verb", verb, "request_id", req.Headers().Get(bus.HeaderRequestID), "duration", time.Since(start)}
		if id != "" {
			attrs = append(attrs, "server_id", id)
		}
		if err != nil {
			e := apierr.From(err)
			attrs = append(attrs, "code", e.Code, "error", e.Message)
			if e.Field != "" {
				attrs = append(attrs, "field", e.Field)
			}
			if e.Code == apierr.Internal || e.Code == apierr.ServiceUnavailable {
				s.log.Warn("credential request failed", attrs...)
			} else {
				s.log.Info("credential request refused", attrs...)
			}
			return nil, err
		}
		s.log.Info("credential request", attrs...)
		return out, nil
	}
}

// keyedMutex serialises the read-modify-write of one server's record (merge,
// delete of names, OAuth refresh: a refresh token may be single use, so two
// concurrent refreshes would lose the token).
type keyedMutex struct {
	mu sync.Mutex
	m  map[string]*keyedEntry
}

type keyedEntry struct {
	mu   sync.Mutex
	refs int
}

// lock takes key's lock, giving up when ctx ends first.
func (k *keyedMutex) lock(ctx context.Context, key string) (unlock func(), err error) {
	k.mu.Lock()
	e := k.m[key]
	if e == nil {
		e = &keyedEntry{}
		k.m[key] = e
	}
	e.refs++
	k.mu.Unlock()
	release := func() {
		k.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
	got := make(chan struct{})
	go func() { e.mu.Lock(); close(got) }()
	select {
	case <-got:
		return func() { e.mu.Unlock(); release() }, nil
	case <-ctx.Done():
		// The goroutine still takes the lock eventually: hand it straight back.
		go func() { <-got; e.mu.Unlock(); release() }()
		return nil, apierr.Wrap(apierr.Network, "timed out waiting for another request on the same server", ctx.Err())
	}
}
