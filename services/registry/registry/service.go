package registry

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/libs/apierr"
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
		o.SourceTimeout = 5 * time.Second
	}
	if o.CacheTTL <= 0 {
		o.CacheTTL = 10 * time.Minute
	}
	if o.StaleTTL <= 0 {
		o.StaleTTL = 24 * time.Hour
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
	log := opts.Logger.With("service", "registry")
	return &Service{
		nc: nc, opts: opts, subj: bus.NewSubjects(opts.Prefix), log: log,
		official: off, smithery: smi,
		offGet: newFetcher(SourceOfficialLabel, opts.HTTPClient, nil),
		smiGet: newFetcher(SourceSmitheryLabel, opts.HTTPClient, smitheryAuth(opts)),
		cache:  &cache{ttl: opts.CacheTTL, now: time.Now, log: log},
		ready:  make(chan struct{}),
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
	setup, cancel := context.WithTimeout(ctx, 30*time.Second)
	kv, err := ensureCacheBucket(setup, js, s.opts.StaleTTL, s.opts.Replicas)
	cancel()
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	s.cache.kv = kv
	svc, err := micro.AddService(s.nc, micro.Config{
		Name:        ServiceName,
		Version:     Version,
		Description: "mcpbus registry: search of the Official MCP Registry and Smithery, install plans",
		QueueGroup:  ServiceName,
	})
	if err != nil {
		return fmt.Errorf("registry: micro service: %w", err)
	}
	for verb, h := range map[string]bus.HandlerFunc{"search": s.handleSearch, "get": s.handleGet} {
		subject := s.subj.Service("registry", verb)
		if err := svc.AddEndpoint("registry-"+verb, bus.JSONHandler(s.log, h), micro.WithEndpointSubject(subject)); err != nil {
			_ = svc.Stop()
			return fmt.Errorf("registry: endpoint %s: %w", subject, err)
		}
	}
	// The subscriptions reach the server before anyone is told the service is up.
	if err := s.nc.FlushTimeout(10 * time.Second); err != nil {
		_ = svc.Stop()
		return fmt.Errorf("registry: flushing subscriptions: %w", err)
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

// fetched is a registry answer, live or from the cache.
type fetched struct {
	body      []byte
	stale     bool
	fetchedAt time.Time
	liveErr   error // why a stale answer stands in
}

// fetchCached returns the answer for rawURL: a fresh cache entry, else the
// registry's answer (checked by parse before it is cached), else — when the
// registry is down — the stale cache entry.
func (s *Service) fetchCached(ctx context.Context, source string, f *fetcher, rawURL string, parse func([]byte) error) (fetched, error) {
	entry, fresh := s.cache.get(ctx, source, rawURL)
	if fresh && parse(entry.Body) == nil {
		return fetched{body: entry.Body, fetchedAt: entry.FetchedAt}, nil
	}
	body, err := f.get(ctx, rawURL)
	if err == nil {
		if perr := parse(body); perr != nil {
			err = malformed(f.label, perr)
		}
	}
	if err == nil {
		s.cache.put(ctx, source, rawURL, body)
		return fetched{body: body, fetchedAt: time.Now()}, nil
	}
	if entry != nil && down(err) {
		if parse(entry.Body) == nil {
			s.log.Warn("registry down, serving stale cache", "source", source, "fetched_at", entry.FetchedAt, "error", err)
			return fetched{body: entry.Body, stale: true, fetchedAt: entry.FetchedAt, liveErr: err}, nil
		}
	}
	return fetched{}, err
}

// sourceHits is one source's part of a search.
type sourceHits struct {
	source string
	hits   []candidate
	more   bool
	stale  bool
	// warn is a failure that left results (stale or partial); err one that left none.
	warn error
	err  error
}

// Search answers mcp.v1.registry.search.
func (s *Service) Search(ctx context.Context, in model.RegistrySearchRequest) (*model.RegistrySearchReply, error) {
	q, sources, page, size, err := checkSearch(in)
	if err != nil {
		return nil, err
	}
	// Every page of a query comes out of the same window (at least the first
	// 100 hits of each source), so moving through pages does not reshuffle them.
	window := (page*size + 99) / 100 * 100
	results := make([]sourceHits, len(sources))
	var wg sync.WaitGroup
	for i, src := range sources {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, cancel := context.WithTimeout(ctx, s.opts.SourceTimeout)
			defer cancel()
			if src == model.RegistryOfficial {
				results[i] = s.searchOfficial(sctx, q, window)
			} else {
				results[i] = s.searchSmithery(sctx, q, window)
			}
		}()
	}
	wg.Wait()

	reply := &model.RegistrySearchReply{Page: page, PageSize: size, Results: []model.RegistryResult{}}
	var official, smithery []candidate
	var failed []sourceHits
	more := false
	for _, r := range results {
		if r.err != nil {
			failed = append(failed, r)
			reply.Warnings = append(reply.Warnings, warning(r.source, r.err))
			continue
		}
		if r.warn != nil {
			reply.Warnings = append(reply.Warnings, warning(r.source, r.warn))
		}
		reply.Stale = reply.Stale || r.stale
		more = more || r.more
		if r.source == model.RegistryOfficial {
			official = r.hits
		} else {
			smithery = r.hits
		}
	}
	if len(failed) == len(results) {
		return nil, allFailed(failed)
	}
	all := mergeRank(q, official, smithery)
	reply.Total = len(all)
	start := min((page-1)*size, len(all))
	end := min(start+size, len(all))
	reply.Results = append(reply.Results, all[start:end]...)
	reply.HasMore = end < len(all) || more
	return reply, nil
}

func warning(source string, err error) model.RegistryWarning {
	e := apierr.From(err)
	return model.RegistryWarning{Source: source, Code: string(e.Code), Message: e.Message}
}

// allFailed is the error when no source answered: the shared code when they
// agree (UNAUTHORIZED from the only source asked), else SERVICE_UNAVAILABLE
// — or NETWORK_ERROR when every source timed out or was unreachable.
func allFailed(failed []sourceHits) error {
	code := apierr.Of(failed[0].err)
	msgs := make([]string, 0, len(failed))
	for _, f := range failed {
		if apierr.Of(f.err) != code {
			code = apierr.ServiceUnavailable
		}
		msgs = append(msgs, apierr.From(f.err).Message)
	}
	if len(failed) > 1 && code != apierr.Network {
		code = apierr.ServiceUnavailable
	}
	return apierr.New(code, strings.Join(msgs, "; "))
}

// searchOfficial walks GET /v0.1/servers pages (latest versions only) until
// window hits are in or the registry has no more.
func (s *Service) searchOfficial(ctx context.Context, q string, window int) sourceHits {
	out := sourceHits{source: model.RegistryOfficial}
	seen := map[string]bool{}
	cursor := ""
	for len(out.hits) < window {
		var list *OfficialList
		rawURL := officialListURL(s.official, ListParams{Search: q, Limit: min(window, 100), Cursor: cursor, Version: "latest"})
		f, err := s.fetchCached(ctx, "official", s.offGet, rawURL, func(b []byte) (err error) {
			list, err = ParseOfficialList(b)
			return err
		})
		if err != nil {
			if len(out.hits) == 0 {
				out.err = err
			} else {
				out.warn, out.more = err, true
			}
			return out
		}
		if f.stale {
			out.stale = true
			out.warn = staleWarning(f)
		}
		for _, e := range list.Servers {
			if !e.Active() || !e.IsLatest || e.Server.Name == "" || seen[e.Server.Name] {
				continue
			}
			seen[e.Server.Name] = true
			out.hits = append(out.hits, candidate{
				source: model.RegistryOfficial, pos: len(out.hits), name: e.Server.Name,
				title: clean(e.Server.Title, 200), description: clean(e.Server.Description, 1000),
				version: e.Server.Version, homepage: e.Server.WebsiteURL, verified: true,
				remote: len(e.Server.Remotes) > 0, stale: f.stale,
			})
		}
		if list.NextCursor == "" || list.NextCursor == cursor || len(list.Servers) == 0 {
			return out
		}
		cursor = list.NextCursor
	}
	out.more = cursor != ""
	return out
}

// searchSmithery walks GET /servers pages until window hits are in.
func (s *Service) searchSmithery(ctx context.Context, q string, window int) sourceHits {
	out := sourceHits{source: model.RegistrySmithery}
	seen := map[string]bool{}
	size := min(window, 100)
	for page := 1; len(out.hits) < window; page++ {
		var list *SmitheryList
		rawURL := smitheryListURL(s.smithery, q, page, size)
		f, err := s.fetchCached(ctx, "smithery", s.smiGet, rawURL, func(b []byte) (err error) {
			list, err = ParseSmitheryList(b)
			return err
		})
		if err != nil {
			if len(out.hits) == 0 {
				out.err = err
			} else {
				out.warn, out.more = err, true
			}
			return out
		}
		if f.stale {
			out.stale = true
			out.warn = staleWarning(f)
		}
		for _, sv := range list.Servers {
			if sv.QualifiedName == "" || seen[sv.QualifiedName] {
				continue
			}
			seen[sv.QualifiedName] = true
			out.hits = append(out.hits, candidate{
				source: model.RegistrySmithery, pos: len(out.hits), name: sv.QualifiedName,
				title: clean(sv.DisplayName, 200), description: clean(sv.Description, 1000),
				homepage: sv.Homepage, iconURL: sv.IconURL, verified: sv.Verified, useCount: sv.UseCount,
				remote: sv.Remote, stale: f.stale,
			})
		}
		last := list.Pagination.TotalPages
		if len(list.Servers) == 0 || (last > 0 && page >= last) || (last == 0 && len(list.Servers) < size) {
			return out
		}
	}
	out.more = true
	return out
}

func staleWarning(f fetched) error {
	e := apierr.From(f.liveErr)
	return apierr.Newf(e.Code, "%s; showing cached results from %s", e.Message, f.fetchedAt.UTC().Format(time.RFC3339))
}

// Get answers mcp.v1.registry.get: the install plan of one entry.
func (s *Service) Get(ctx context.Context, in model.RegistryGetRequest) (*model.InstallPlan, error) {
	in, err := checkGet(in)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.SourceTimeout)
	defer cancel()
	h := host{has: s.opts.HasCommand}
	if in.Registry == model.RegistryOfficial {
		return s.getOfficial(ctx, in, h)
	}
	return s.getSmithery(ctx, in)
}

func (s *Service) getOfficial(ctx context.Context, in model.RegistryGetRequest, h host) (*model.InstallPlan, error) {
	version := in.Version
	if version == "" {
		version = "latest"
	}
	rawURL := officialGetURL(s.official, in.Name, version)
	var e *OfficialEntry
	f, err := s.fetchCached(ctx, "official", s.offGet, rawURL, func(b []byte) (err error) {
		e, err = ParseOfficialEntry(b)
		return err
	})
	if err != nil {
		if apierr.Of(err) == apierr.NotFound {
			return nil, apierr.Newf(apierr.NotFound, "%s (version %s) is not in the official registry", in.Name, version).WithField("name")
		}
		return nil, err
	}
	if e.Status == StatusDeleted {
		return nil, apierr.Newf(apierr.NotFound, "%s (version %s) was deleted from the official registry", in.Name, version).WithField("name")
	}
	var attempts []*attempt
	for i, p := range e.Server.Packages {
		attempts = append(attempts, officialPackage(p, i, h, in.Variables))
	}
	for i, r := range e.Server.Remotes {
		attempts = append(attempts, officialRemote(r, len(e.Server.Packages)+i, in.Variables))
	}
	info := entryInfo{
		source: model.SourceOfficial, name: e.Server.Name, version: e.Server.Version,
		title: e.Server.Title, description: e.Server.Description, url: rawURL,
	}
	plan, err := buildPlan(info, attempts, in)
	if err != nil {
		return nil, err
	}
	if e.Status == StatusDeprecated {
		plan.Warnings = append(plan.Warnings, "the publisher deprecated this server")
	}
	s.markStale(plan, f)
	return plan, nil
}

func (s *Service) getSmithery(ctx context.Context, in model.RegistryGetRequest) (*model.InstallPlan, error) {
	rawURL := smitheryGetURL(s.smithery, in.Name)
	var d *SmitheryDetail
	f, err := s.fetchCached(ctx, "smithery", s.smiGet, rawURL, func(b []byte) (err error) {
		d, err = ParseSmitheryDetail(b)
		return err
	})
	if err != nil {
		if apierr.Of(err) == apierr.NotFound {
			return nil, apierr.Newf(apierr.NotFound, "%s is not in the Smithery registry", in.Name).WithField("name")
		}
		return nil, err
	}
	var attempts []*attempt
	for i, c := range d.Connections {
		attempts = append(attempts, smitheryConnection(c, i, in.Variables))
	}
	info := entryInfo{
		source: model.SourceSmithery, name: d.QualifiedName, qualifiedName: d.QualifiedName,
		title: d.DisplayName, description: d.Description, url: rawURL,
	}
	plan, err := buildPlan(info, attempts, in)
	if err != nil {
		return nil, err
	}
	for _, t := range d.Tools {
		plan.Tools = append(plan.Tools, model.PlanTool{Name: clean(t.Name, 128), Description: clean(t.Description, 1000)})
	}
	if d.Security != nil && !d.Security.ScanPassed {
		plan.Warnings = append(plan.Warnings, "Smithery's security scan of this server did not pass")
	}
	s.markStale(plan, f)
	return plan, nil
}

func (s *Service) markStale(plan *model.InstallPlan, f fetched) {
	if f.stale {
		plan.Stale = true
		plan.Warnings = append(plan.Warnings, apierr.From(staleWarning(f)).Message)
	}
}

var (
	officialNamePattern = regexp.MustCompile(`^[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+$`)
	smitheryNamePattern = regexp.MustCompile(`^@?[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)?$`)
	variablePattern     = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)
)

// checkSearch validates a search request and applies its defaults.
func checkSearch(in model.RegistrySearchRequest) (q string, sources []string, page, size int, err error) {
	q = strings.TrimSpace(in.Query)
	switch {
	case q == "":
		return "", nil, 0, 0, apierr.Invalid("query", "query is required")
	case utf8.RuneCountInString(q) > model.MaxRegistryQueryLen:
		return "", nil, 0, 0, apierr.Invalid("query", fmt.Sprintf("query must be at most %d characters", model.MaxRegistryQueryLen))
	case !utf8.ValidString(q) || strings.ContainsFunc(q, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return "", nil, 0, 0, apierr.Invalid("query", "query must be text without control characters")
	}
	switch in.Registry {
	case "", model.RegistryBoth:
		sources = []string{model.RegistryOfficial, model.RegistrySmithery}
	case model.RegistryOfficial, model.RegistrySmithery:
		sources = []string{in.Registry}
	default:
		return "", nil, 0, 0, apierr.Invalid("registry", "registry must be official, smithery or both")
	}
	page, size = in.Page, in.PageSize
	if page == 0 {
		page = 1
	}
	if size == 0 {
		size = model.DefaultRegistryPageSize
	}
	switch {
	case page < 0:
		return "", nil, 0, 0, apierr.Invalid("page", "page must be 1 or more")
	case size < 0 || size > model.MaxRegistryPageSize:
		return "", nil, 0, 0, apierr.Invalid("page_size", fmt.Sprintf("page_size must be between 1 and %d", model.MaxRegistryPageSize))
	case page > model.MaxRegistryResults/size:
		return "", nil, 0, 0, apierr.Invalid("page", fmt.Sprintf("page × page_size must be at most %d: refine the query", model.MaxRegistryResults))
	}
	return q, sources, page, size, nil
}

// checkGet validates a get request; an empty registry is inferred from the
// name (a reverse-DNS namespace means the Official Registry).
func checkGet(in model.RegistryGetRequest) (model.RegistryGetRequest, error) {
	in.Name = strings.TrimSpace(in.Name)
	if in.Name == "" {
		return in, apierr.Invalid("name", "name is required")
	}
	if len(in.Name) > 200 {
		return in, apierr.Invalid("name", "name must be at most 200 characters")
	}
	if in.Registry == "" {
		ns, _, _ := strings.Cut(in.Name, "/")
		if officialNamePattern.MatchString(in.Name) && strings.Contains(ns, ".") {
			in.Registry = model.RegistryOfficial
		} else {
			in.Registry = model.RegistrySmithery
		}
	}
	switch in.Registry {
	case model.RegistryOfficial:
		if !officialNamePattern.MatchString(in.Name) {
			return in, apierr.Invalid("name", "an official registry name looks like io.github.owner/server")
		}
		if in.Version != "" && in.Version != "latest" && !versionPattern.MatchString(in.Version) {
			return in, apierr.Invalid("version", "version must be latest or an exact version such as 1.2.3")
		}
	case model.RegistrySmithery:
		if !smitheryNamePattern.MatchString(in.Name) {
			return in, apierr.Invalid("name", "a Smithery name looks like @owner/server or server")
		}
		if in.Version != "" {
			return in, apierr.Invalid("version", "Smithery servers have no versions")
		}
	default:
		return in, apierr.Invalid("registry", "registry must be official or smithery")
	}
	switch in.Prefer {
	case "", model.PackageNPM, model.PackageDocker, model.PackageHTTP:
	default:
		return in, apierr.Invalid("prefer", "prefer must be npm, docker or http")
	}
	if len(in.Variables) > 100 {
		return in, apierr.Invalid("variables", "at most 100 variables")
	}
	for k, v := range in.Variables {
		if !variablePattern.MatchString(k) {
			return in, apierr.Invalid("variables", fmt.Sprintf("variable name %q is not valid", clean(k, 64)))
		}
		if len(v) > 4096 || strings.ContainsAny(v, "\x00\r\n") {
			return in, apierr.Invalid("variables."+k, "a variable value must be one line of at most 4096 bytes")
		}
	}
	return in, nil
}
