package credential

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nkeys"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/services/credential/store"
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
)

// Options configure the service. Store is required.
type Options struct {
	Prefix string
	Store  store.Store
	Logger *slog.Logger
	// Now is the clock for OAuth expiry (default time.Now; tests move it).
	Now func() time.Time
	// HTTPClient talks to OAuth token endpoints (default: 15 s timeout).
	HTTPClient *http.Client
	// RequestTimeout bounds the work on one request (default 20 s).
	RequestTimeout time.Duration
	// RefreshBefore refreshes an OAuth token that expires within this long (default 1 min).
	RefreshBefore time.Duration
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
		o.HTTPClient = &http.Client{Timeout: 15 * time.Second}
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 20 * time.Second
	}
	if o.RefreshBefore <= 0 {
		o.RefreshBefore = time.Minute
	}
}

// Service is the credential service.
type Service struct {
	nc    *nats.Conn
	opts  Options
	subj  bus.Subjects
	log   *slog.Logger
	store store.Store
	// curve is this instance's xkey pair: resolve replies are sealed with it.
	curve  nkeys.KeyPair
	pubKey string
	locks  keyedMutex

	mu  sync.Mutex
	svc micro.Service
}

// New prepares the service on nc; Start or Run serves it.
func New(nc *nats.Conn, opts Options) (*Service, error) {
	opts.defaults()
	if nc == nil {
		return nil, errors.New("credential: no NATS connection")
	}
	if opts.Store == nil {
		return nil, errors.New("credential: no store")
	}
	kp, err := nkeys.CreateCurveKeys()
	if err != nil {
		return nil, fmt.Errorf("credential: creating the curve key pair: %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("credential: curve public key: %w", err)
	}
	return &Service{
		nc: nc, opts: opts, subj: bus.NewSubjects(opts.Prefix), store: opts.Store,
		log:   opts.Logger.With("service", "credential", "backend", opts.Store.Name()),
		curve: kp, pubKey: pub, locks: keyedMutex{m: map[string]*keyedEntry{}},
	}, nil
}

// PublicKey is the curve public key that resolve replies are sealed with.
func (s *Service) PublicKey() string { return s.pubKey }

// Start registers the micro service and its endpoints.
func (s *Service) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.svc != nil {
		return errors.New("credential: already started")
	}
	svc, err := micro.AddService(s.nc, micro.Config{
		Name:        ServiceName,
		Version:     Version,
		Description: "mcpbus credential service: secrets of MCP servers",
		Metadata:    map[string]string{"backend": s.store.Name()},
		QueueGroup:  ServiceName,
	})
	if err != nil {
		return fmt.Errorf("credential: micro service: %w", err)
	}
	handlers := map[string]handler{
		VerbSet: s.handleSet, VerbDelete: s.handleDelete, VerbDescribe: s.handleDescribe, VerbResolve: s.handleResolve,
	}
	for _, verb := range []string{VerbSet, VerbDelete, VerbDescribe, VerbResolve} {
		h := s.logged(verb, handlers[verb])
		if err := svc.AddEndpoint(verb, bus.JSONHandler(s.log, h), micro.WithEndpointSubject(s.subj.Service("cred", verb))); err != nil {
			_ = svc.Stop()
			return fmt.Errorf("credential: endpoint %s: %w", verb, err)
		}
	}
	s.svc = svc
	s.log.Info("credential service started", "prefix", s.subj.Prefix)
	return nil
}

// Stop drains the endpoints.
func (s *Service) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.svc == nil {
		return nil
	}
	err := s.svc.Stop()
	s.svc = nil
	s.log.Info("credential service stopped")
	return err
}

// Run serves until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	if err := s.Start(); err != nil {
		return err
	}
	<-ctx.Done()
	return s.Stop()
}

// handler answers one request body; it returns the server id it was about
// (for the log line) with the reply.
type handler func(ctx context.Context, data []byte) (serverID string, out any, err error)

// logged bounds a request in time and logs its outcome: verb, server id,
// error code and message, never a value (error messages carry no values).
func (s *Service) logged(verb string, h handler) bus.HandlerFunc {
	return func(ctx context.Context, req micro.Request) (any, error) {
		timeout := s.opts.RequestTimeout
		if t := bus.CallerTimeout(nats.Header(req.Headers())); t > 0 && t < timeout {
			timeout = t
		}
		ctx, cancel := context.WithTimeout(ctx, timeout)
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
