package registry

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os/exec"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// Version of the registry service (micro requires semver).
const Version = "0.1.0"

// ServiceName is the micro name of the registry service.
const ServiceName = "mcpbus-registry"

// Default registry base URLs.
const (
	DefaultOfficialURL = "https://registry.modelcontextprotocol.io"
	DefaultSmitheryURL = "https://registry.smithery.ai"
)

// Options configure the service. Zero values take the defaults.
type Options struct {
	Prefix string
	// OfficialURL and SmitheryURL are the registries' base URLs (private
	// sub-registries speak the same APIs).
	OfficialURL string
	SmitheryURL string
	// SmitheryAPIKey is sent as a bearer token to Smithery when set; without
	// it, the key stored in the credential service (model.RegistryCredentialsID)
	// is used when Credentials is set.
	SmitheryAPIKey string
	Credentials    CredResolver
	// HTTPClient makes the registry requests (default: a plain client; each
	// request is bounded by SourceTimeout).
	HTTPClient *http.Client
	// SourceTimeout bounds one source's part of a request (default 5s).
	SourceTimeout time.Duration
	// CacheTTL is how long a registry answer is used without asking again
	// (default 10m); StaleTTL how long it may still stand in, marked stale,
	// while the registry is down (default 24h; the cache bucket's max age).
	CacheTTL time.Duration
	StaleTTL time.Duration
	// HasCommand reports whether a command is installed (default exec.LookPath).
	HasCommand func(cmd string) bool
	// Replicas of the cache bucket (default 1).
	Replicas int
	Logger   *slog.Logger
}

func (o *Options) defaults() {
	if o.Prefix == "" {
		o.Prefix = bus.DefaultPrefix
	}
	if o.OfficialURL == "" {
		o.OfficialURL = DefaultOfficialURL
	}
	if o.SmitheryURL == "" {
		o.SmitheryURL = DefaultSmitheryURL
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{}
	}
	if o.SourceTimeout <= 0 {
		o.SourceTimeout = DefaultSourceTimeout
	}
	if o.CacheTTL <= 0 {
		o.CacheTTL = DefaultCacheTTL
	}
	if o.StaleTTL <= 0 {
		o.StaleTTL = DefaultStaleTTL
	}
	if o.StaleTTL < o.CacheTTL {
		o.StaleTTL = o.CacheTTL
	}
	if o.HasCommand == nil {
		o.HasCommand = func(cmd string) bool { _, err := exec.LookPath(cmd); return err == nil }
	}
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Service answers mcp.v1.registry.{search,get}.
type Service struct {
	nc       *nats.Conn
	opts     Options
	subj     bus.Subjects
	log      *slog.Logger
	official *url.URL
	smithery *url.URL
	offGet   *fetcher
	smiGet   *fetcher
	cache    *cache
	metrics  cacheMetrics
	ready    chan struct{}
}

// New prepares the service on nc; Run starts it.
func New(nc *nats.Conn, opts Options) (*Service, error) {
	opts.defaults()
	off, err := parseBaseURL(opts.OfficialURL)
	if err != nil {
		return nil, fmt.Errorf("registry: official: %w", err)
	}
	smi, err := parseBaseURL(opts.SmitheryURL)
	if err != nil {
		return nil, fmt.Errorf("registry: smithery: %w", err)
	}
	log := opts.Logger
	return &Service{
		nc: nc, opts: opts, subj: bus.NewSubjects(opts.Prefix), log: log,
		official: off, smithery: smi,
		offGet: newFetcher(SourceOfficialLabel, opts.HTTPClient, nil),
		smiGet: newFetcher(SourceSmitheryLabel, opts.HTTPClient, smitheryAuth(opts)),
		cache:  &cache{ttl: opts.CacheTTL, now: time.Now, log: log},
		ready:  make(chan struct{}), metrics: newCacheMetrics(),
	}, nil
}

// smitheryAuth is the configured key, else the stored one, else none.
func smitheryAuth(opts Options) func(*http.Request) {
	if opts.SmitheryAPIKey != "" || opts.Credentials == nil {
		return bearer(opts.SmitheryAPIKey)
	}
	k := &storedKey{resolver: opts.Credentials, ttl: time.Minute}
	return k.apply
}

// Ready is closed once the endpoints answer.
func (s *Service) Ready() <-chan struct{} { return s.ready }

// Run serves until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	js, err := jetstream.New(s.nc)
	if err != nil {
		return fmt.Errorf("registry: jetstream: %w", err)
	}
	kv, err := ensureCacheBucket(ctx, js, s.opts.StaleTTL, s.opts.Replicas, s.log)
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	// Within cacheOpTimeout: a try that fails fast (no responders, a
	// reconnect) is retried; one that goes unanswered uses up the bound.
	s.cache.kv = bus.RetryKV(kv)
	cfg := bus.ServiceConfig{Name: ServiceName, Version: Version,
		Description: "mcpbus registry: search of the Official MCP Registry and Smithery, install plans"}
	for _, verb := range []string{"search", "get"} {
		h := map[string]bus.HandlerFunc{"search": s.handleSearch, "get": s.handleGet}[verb]
		cfg.Endpoints = append(cfg.Endpoints, bus.Endpoint{Name: "registry-" + verb,
			Subject: s.subj.Service("registry", verb), Handler: bus.JSONHandler(s.log, h)})
	}
	svc, err := bus.StartService(s.nc, cfg)
	if err != nil {
		return err
	}
	close(s.ready)
	s.log.Info("registry service started", "prefix", s.subj.Prefix, "official", s.official.String(), "smithery", s.smithery.String())
	<-ctx.Done()
	return svc.Stop()
}

func (s *Service) handleSearch(ctx context.Context, req micro.Request) (any, error) {
	var in model.RegistrySearchRequest
	if err := bus.Decode(req.Data(), &in); err != nil {
		return nil, err
	}
	return s.Search(ctx, in)
}

func (s *Service) handleGet(ctx context.Context, req micro.Request) (any, error) {
	var in model.RegistryGetRequest
	if err := bus.Decode(req.Data(), &in); err != nil {
		return nil, err
	}
	return s.Get(ctx, in)
}
