// Package runner is the runner service: it owns MCP server processes and
// connections, serves their tools on the bus and publishes their status.
package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/mcpbus/mcpbus/libs/audit"
	"github.com/panjf2000/ants/v2"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/approvals"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/secretfile"
	"github.com/mcpbus/mcpbus/libs/toolsearch"
	"github.com/mcpbus/mcpbus/services/runner/internal/launch"
	"github.com/mcpbus/mcpbus/services/runner/internal/pidfile"
	"github.com/mcpbus/mcpbus/services/runner/internal/sandbox"
)

// Version of the runner service (micro requires semver).
const Version = "0.1.0"

// ServiceName is the micro name of the runner's control endpoints; each
// managed MCP server is a micro service of its own named ServerServiceName.
const (
	ServiceName       = "mcpbus-runner"
	ServerServiceName = "mcpbus-server"
)

// SecretResolver fetches the credentials of a server (by config id) from the
// credential service; libs/credclient.Resolver is the implementation. Without
// one, a server that needs credentials fails to start.
type SecretResolver interface {
	Resolve(ctx context.Context, serverID string) (model.ResolvedCredentials, error)
}

// Options configure a runner. Zero values take the defaults.
type Options struct {
	Prefix string
	// ID names this runner instance (default: a new uuid).
	ID     string
	Logger *slog.Logger
	// CallTimeout bounds a tool call (default 30s; a config's runtime.call_timeout overrides).
	CallTimeout time.Duration
	// InputTimeout bounds the wait for a caller's answer to a server's
	// request for input (default 10m); the call's timeout stops meanwhile.
	InputTimeout time.Duration
	// StartTimeout bounds spawn + handshake + tools/list (default 60s).
	StartTimeout time.Duration
	// StopGrace is how long a child gets after stdin is closed before SIGTERM
	// (default 500ms); StopTimeout how long after SIGTERM before SIGKILL (default 5s).
	StopGrace   time.Duration
	StopTimeout time.Duration
	// MaxArgsBytes bounds a call's arguments (default 1 MiB).
	MaxArgsBytes int
	// Launch are the host settings of spawning.
	Launch launch.Options
	// Resolver resolves secret references (optional).
	Resolver SecretResolver
	// Replicas of the shared JetStream assets (default 1).
	Replicas int
	// EventsMaxBytes and AuditMaxBytes bound the shared streams
	// (bus.AssetOptions; 0: the defaults; mcpbus up sets them from its NATS
	// storage).
	EventsMaxBytes, AuditMaxBytes int64

	// IdleTimeout stops a server after this long without calls (default 30m;
	// negative: never). A config's runtime.idle_timeout overrides it.
	IdleTimeout time.Duration
	// HealthInterval is how often a running server is pinged (default 60s);
	// HealthTimeout bounds one ping (default 10s); HealthFailures failures in
	// a row restart the server (default 3).
	HealthInterval time.Duration
	HealthTimeout  time.Duration
	HealthFailures int
	// RestartBackoff is the first automatic restart delay, doubled per attempt
	// up to RestartBackoffMax (defaults 1s, 60s); MaxRestarts attempts in a row
	// at most (default 3). A server that ran HealthyAfter (default 5m) before
	// crashing gets a fresh series.
	RestartBackoff    time.Duration
	RestartBackoffMax time.Duration
	MaxRestarts       int
	HealthyAfter      time.Duration
	// MaxServers bounds the servers running at once on this runner (default 10);
	// MaxInflight the calls in flight per server (default 64). Beyond them
	// callers get SERVICE_UNAVAILABLE.
	MaxServers  int
	MaxInflight int
	// IdentityKey is the runner's bus identity (nkey public key), written
	// into its leases; its resolver signs with the same key (""/none on an
	// unauthenticated bus).
	IdentityKey string
	// Audit appends the audited events to the service's audit chains (nil:
	// none, on a bus without identities); Build makes it, Run closes it.
	Audit *audit.Writer
	// AgentMaxInflight bounds one agent's calls in flight per server unless
	// its record says otherwise (0: a quarter of the server's max_inflight,
	// so one agent's flood leaves the rest to everyone else).
	AgentMaxInflight int
	// TickInterval is the period of the idle and health checks (default 1s).
	TickInterval time.Duration
	// DataDir, when set, keeps a pid file per spawned server (DataDir/pids), so
	// a runner restarted after a SIGKILL ends the orphans of its predecessor.
	// New refuses one another user owns or may write (secretfile.PrivateDir).
	DataDir string
	// LeaseTTL is how long an ownership lease lives unless renewed (default
	// 5s): a runner that dies loses its servers to others after that long.
	LeaseTTL time.Duration
	// ExecTypes are the package types this runner spawns or connects (nil:
	// all of model.ExecTypes); ExecBinaryPrefixes the absolute paths a binary
	// package must be under (nil: any). A config they refuse is never
	// launched: its status is error (VALIDATION_ERROR). See policy.go.
	ExecTypes          []string
	ExecBinaryPrefixes []string
	// KeyfilePrefixes are the paths a keyfile must be under, after
	// resolving symlinks (nil: no keyfile is read); never the data dir's own
	// files outside DataDir/keyfiles. DockerMountPrefixes are the host paths
	// a docker package may bind mount (nil: none).
	KeyfilePrefixes     []string
	DockerMountPrefixes []string
	// OAuthEarlyRefresh is how long before an HTTP upstream's OAuth access
	// token expires the runner asks the credential service for a fresh one
	// (default 30s; keep it at most the credential service's refresh
	// window, so that the service refreshes when asked).
	OAuthEarlyRefresh time.Duration
	// PinBudget is how many new or changed tool definitions one server may
	// pin (and announce as tool_changed) a day, in a burst of as many
	// (default 10,000: twice the largest tool list; pins.go).
	PinBudget int
	// SecretFeedInterval is how often the runner fetches the credential
	// service's fingerprint feed besides on every change event (default
	// 2m; feed.go).
	SecretFeedInterval time.Duration

	// ChildSandbox is "auto" (default: Landlock where the kernel has it) or
	// "off"; ChildUID and ChildGID (0: none) run stdio children as another
	// user; ChildProtect are paths children may not read besides the data
	// dir and keyfiles; ChildAllow paths they may read and write besides
	// their own (a uv or pip cache). See internal/sandbox.
	ChildSandbox    string
	ChildUID        int
	ChildGID        int
	ChildProtect    []string
	ChildAllow      []string
	childNoLandlock bool // tests of the uid switch alone
	// ChildPIDNamespace is "auto" (default: each stdio server is the init
	// of a PID namespace of its own where the host allows it, so nothing it
	// starts outlives it) or "off" (its processes are found through /proc
	// alone). See internal/sandbox/pidns.go.
	ChildPIDNamespace string

	// TaskRetention is how long a task's record (and result) is kept after
	// its last change (default 24h); TaskTimeout bounds a task's run
	// (default 1h, in place of the call timeout) and its wait for a run to
	// start it (taskexpire.go); TaskAckWait is how long a
	// run held by a runner that stopped answering waits before another
	// owner gets it (default 15s). See tasks.go.
	TaskRetention time.Duration
	TaskTimeout   time.Duration
	TaskAckWait   time.Duration
	// TaskMaxPerPrincipal bounds the tasks one principal has kept
	// (default DefaultTaskMaxPerPrincipal; taskquota.go).
	TaskMaxPerPrincipal int
	// TaskMaxBytes bounds KV mcp_tasks, every principal's tasks together
	// (default DefaultTaskMaxBytes; taskstore.go).
	TaskMaxBytes int64
}

func (o *Options) defaults() {
	if o.Prefix == "" {
		o.Prefix = bus.DefaultPrefix
	}
	if o.ID == "" {
		o.ID = uuid.NewString()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	if o.InputTimeout <= 0 {
		o.InputTimeout = DefaultInputTimeout
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	if o.StopGrace <= 0 {
		o.StopGrace = 500 * time.Millisecond
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = 5 * time.Second
	}
	if o.MaxArgsBytes <= 0 {
		o.MaxArgsBytes = 1 << 20
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	setDefault(&o.HealthInterval, 60*time.Second)
	setDefault(&o.HealthTimeout, 10*time.Second)
	setDefault(&o.RestartBackoff, time.Second)
	setDefault(&o.RestartBackoffMax, 60*time.Second)
	setDefault(&o.HealthyAfter, 5*time.Minute)
	setDefault(&o.TickInterval, time.Second)
	setDefault(&o.OAuthEarlyRefresh, 30*time.Second)
	if o.PinBudget <= 0 {
		o.PinBudget = defaultPinBudget
	}
	setDefault(&o.SecretFeedInterval, 2*time.Minute)
	setDefault(&o.LeaseTTL, DefaultLeaseTTL)
	setDefault(&o.TaskRetention, DefaultTaskRetention)
	setDefault(&o.TaskTimeout, DefaultTaskTimeout)
	setDefault(&o.TaskAckWait, DefaultTaskAckWait)
	if o.TaskMaxPerPrincipal <= 0 {
		o.TaskMaxPerPrincipal = DefaultTaskMaxPerPrincipal
	}
	if o.TaskMaxBytes <= 0 {
		o.TaskMaxBytes = DefaultTaskMaxBytes
	}
	if o.HealthFailures <= 0 {
		o.HealthFailures = 3
	}
	if o.MaxRestarts <= 0 {
		o.MaxRestarts = 3
	}
	if o.MaxServers <= 0 {
		o.MaxServers = DefaultMaxServers
	}
	if o.MaxInflight <= 0 {
		o.MaxInflight = 64
	}
	o.ExecTypes = slices.Clone(o.ExecTypes)
	for _, list := range []*[]string{&o.ExecBinaryPrefixes, &o.KeyfilePrefixes, &o.DockerMountPrefixes} {
		*list = slices.Clone(*list)
		for i, p := range *list {
			(*list)[i] = filepath.Clean(p)
		}
	}
}

func setDefault(d *time.Duration, def time.Duration) {
	if *d <= 0 {
		*d = def
	}
}

// Runner manages the MCP servers of the enabled configs.
type Runner struct {
	// progressSeq numbers the progress tokens of calls (their servers see them).
	progressSeq atomic.Uint64
	nc          *nats.Conn
	js          jetstream.JetStream
	assets      *bus.Assets
	subj        bus.Subjects
	opts        Options
	log         *slog.Logger

	svc        micro.Service
	telemetry  callTelemetry
	callEvents *bus.Batcher
	// workers run the servers' requests (calls.go async): a reused goroutine
	// keeps the stack a call grew, which a fresh one grows again per call.
	workers   *ants.Pool
	secrets   *secretGuard     // secrets in tool arguments and results (secrets.go)
	pids      *pidfile.Dir     // nil without a data dir
	sandbox   *sandbox.Sandbox // nil: --child-sandbox=off
	tasks     *taskStore
	approvals *approvals.Store // the approval rules and held calls (approvals.go)
	// principalIDs: the principal ids of the header values seen (perprincipal.go).
	principalIDs principalIDs

	running atomic.Int64 // servers with a live session or starting (takeSlot)
	metrics lifecycleMetrics

	kickCh chan struct{} // asks for an ownership pass
	// natsAway: the last round of lease renewals got no answer (renew.go).
	natsAway atomic.Bool
	// stranded is when a missing replica was first seen that no other runner
	// could take (acquire's, on the ownership loop only).
	stranded map[string]time.Time

	awayStops atomic.Bool // servers stopped while NATS was away (see replay.go)

	// Set by Run before anything writes.
	statusW *latestWriter // KV mcp_status
	toolsW  *latestWriter // KV mcp_tools

	mu      sync.Mutex
	servers map[string]*server          // owned here, by slug
	byID    map[string]string           // config id → slug
	desired map[string]*model.McpConfig // enabled configs, by slug
	leases  map[string]*lease           // held here, by slug

	// ownersMu guards owners; it is a leaf lock (nothing else is taken under it).
	ownersMu sync.Mutex
	owners   map[string]ownerEntry // KV mcp_owners: key → its runner (and a heartbeat's policy)
	// ownersLoaded tells that owners holds a snapshot (an empty cache at
	// start would make every runner look gone, statusview.go).
	ownersLoaded atomic.Bool
	catalog      map[string]model.Catalog
	// searchIndex ranks catalog for tools.search (search.go).
	searchIndex *toolsearch.Index
	status      map[string]model.Status
	// agents are the agents' records (KV mcp_agents) by name.
	agents map[string]model.AgentRecord
	// agentStatus is, by server, the last status sent to agents as
	// publishAgentStatus compares it (guarded by mu).
	agentStatus map[string][]byte
	// agentRates are the agents' token buckets here (admit), by name.
	agentRates sync.Map
	ready      chan struct{}
}

// New prepares a runner on nc. Run starts it.
func New(nc *nats.Conn, opts Options) (*Runner, error) {
	opts.defaults()
	if err := opts.validateExec(); err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	if opts.DataDir != "" {
		// MCP servers run as another uid (--child-uid) and, without
		// Landlock, only file modes keep them out of the data dir: one they
		// may write (a Kubernetes emptyDir is made 0777 and root's) would let
		// them replace the pid files the runner kills by.
		if err := secretfile.PrivateDir(opts.DataDir); err != nil {
			return nil, fmt.Errorf("runner: data dir: %w", err)
		}
	}
	sb, err := newSandbox(opts)
	if err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("runner: jetstream: %w", err)
	}
	guard, err := newSecretGuard()
	if err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	workers, err := ants.NewPool(-1, ants.WithExpiryDuration(workerIdle), ants.WithLogger(discardLogger{}))
	if err != nil {
		return nil, fmt.Errorf("runner: worker pool: %w", err)
	}
	return &Runner{sandbox: sb, secrets: guard, workers: workers,
		nc: nc, js: js, subj: bus.NewSubjects(opts.Prefix), opts: opts,
		callEvents: bus.NewBatcher(nc, callEventDelay, callEventBatch),
		log:        opts.Logger.With("runner", opts.ID),
		servers:    map[string]*server{}, byID: map[string]string{},
		desired: map[string]*model.McpConfig{}, leases: map[string]*lease{}, owners: map[string]ownerEntry{},
		kickCh: make(chan struct{}, 1), stranded: map[string]time.Time{}, metrics: newLifecycleMetrics(),
		catalog: map[string]model.Catalog{}, searchIndex: toolsearch.New(), status: map[string]model.Status{}, agents: map[string]model.AgentRecord{},
		ready:     make(chan struct{}),
		telemetry: newCallTelemetry(),
	}, nil
}

// ID is the runner instance id.
func (r *Runner) ID() string { return r.opts.ID }

// Ready is closed once the runner has applied the configs present at start.
func (r *Runner) Ready() <-chan struct{} { return r.ready }

// Run serves until ctx ends, then stops every server it runs.
func (r *Runner) Run(ctx context.Context) error {
	assets, err := bus.EnsureAssets(ctx, r.js, r.subj, bus.AssetOptions{Replicas: r.opts.Replicas, LeaseTTL: r.opts.LeaseTTL, Logger: r.log,
		EventsMaxBytes: r.opts.EventsMaxBytes, AuditMaxBytes: r.opts.AuditMaxBytes})
	if err != nil {
		return fmt.Errorf("runner: %w", err)
	}
	r.assets = assets
	// Status and catalogs ride out a leader election in the background while
	// they are this runner's to write (mayWrite). Lease writes are retried
	// too, but only within the lease they renew or take (renew.go, ownership.go).
	r.statusW = newLatestWriter(assets.Status, r.mayWrite, r.log)
	r.toolsW = newLatestWriter(assets.Tools, r.mayWrite, r.log)
	if err := r.openTasks(ctx); err != nil {
		return err
	}
	if err := r.openApprovals(ctx); err != nil {
		return err
	}
	r.logSandbox()
	defer r.observeServers()()
	if r.opts.DataDir != "" {
		pids, err := pidfile.Open(filepath.Join(r.opts.DataDir, "pids"))
		if err != nil {
			return fmt.Errorf("runner: %w", err)
		}
		if n, err := pids.Reap(r.sandbox.AsChild); err != nil {
			r.log.Warn("cleaning up orphaned servers failed", "error", err)
		} else if n > 0 {
			r.log.Warn("ended MCP servers orphaned by an earlier runner on this host", "count", n)
		}
		r.pids = pids
	}
	// After the reap: the orphans' temp dirs are free now.
	r.sweepChildTemp()

	watchCtx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWatch()
	var wg sync.WaitGroup
	catalogReady := make(chan struct{})
	wg.Add(9)
	go func() { defer wg.Done(); r.followFeed(watchCtx) }()
	go func() { defer wg.Done(); r.followPrincipalCreds(watchCtx) }()
	go func() { defer wg.Done(); r.watchPins(watchCtx) }()
	go func() { defer wg.Done(); r.watchShared(watchCtx, catalogReady) }()
	go func() { defer wg.Done(); r.forgetReplayedSubs(watchCtx) }()
	go func() { defer wg.Done(); r.maintain(watchCtx) }()
	go func() { defer wg.Done(); r.watchOwners(watchCtx) }()
	go func() { defer wg.Done(); r.sweepTasks(watchCtx) }()
	if err := r.addService(); err != nil {
		return err
	}
	// Configs are applied knowing the stored catalogs (lazy servers reuse
	// them). The watches retry until NATS answers: a stop must not wait.
	select {
	case <-catalogReady:
	case <-ctx.Done():
	}
	go func() { defer wg.Done(); r.watchConfigs(watchCtx) }()
	ownCtx, stopOwning := context.WithCancel(watchCtx)
	owning := make(chan struct{})
	go func() {
		defer close(owning)
		select {
		case <-r.ready:
			r.own(ownCtx)
		case <-ownCtx.Done():
		}
	}()
	r.log.Info("runner started", "prefix", r.subj.Prefix)

	<-ctx.Done()
	r.log.Info("runner stopping: stopping every server and handing it over")
	_ = r.svc.Stop()
	stopOwning()
	<-owning
	r.releaseAll()
	stopWatch()
	wg.Wait()
	r.shutdownAll()
	r.callEvents.Flush()
	r.opts.Audit.Close(r.publishTimeout())
	r.workers.Release() // idle workers end; a request still running finishes on its own
	return nil
}

// shutdownAll stops every managed server in parallel.
func (r *Runner) shutdownAll() {
	r.mu.Lock()
	servers := make([]*server, 0, len(r.servers))
	for _, s := range r.servers {
		servers = append(servers, s)
	}
	r.servers = map[string]*server{}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range servers {
		wg.Add(1)
		go func() { defer wg.Done(); s.close(model.StateStopped, true) }()
	}
	wg.Wait()
}

// addService registers the runner's control endpoints.
func (r *Runner) addService() error {
	cfg := bus.ServiceConfig{Name: ServiceName, Version: Version,
		Description: "mcpbus runner: owns MCP server processes",
		Metadata:    r.serviceMetadata(),
		Endpoints: []bus.Endpoint{{Name: "tools-list", Subject: r.subj.ToolsList(),
			Handler: bus.JSONHandler(r.log, r.handleToolsList)},
			{Name: "agent-tools-list", Subject: r.subj.AgentToolsList(),
				Handler: bus.JSONHandler(r.log, r.handleToolsList)},
			{Name: "tools-review", Subject: r.subj.ToolsReview(), Handler: bus.JSONHandler(r.log, r.handleToolsReview)},
			{Name: "tools-approve", Subject: r.subj.ToolsApprove(), Handler: bus.JSONHandler(r.log, r.handleToolsApprove)},
			{Name: "tools-search", Subject: r.subj.ToolsSearch(),
				Handler: bus.JSONHandler(r.log, r.handleToolsSearch)},
			{Name: "agent-tools-search", Subject: r.subj.AgentToolsSearch(),
				Handler: bus.JSONHandler(r.log, r.handleToolsSearch)}}, Logger: r.log}
	cfg.Endpoints = append(cfg.Endpoints, r.taskEndpoints()...)
	for _, verb := range []string{"start", "stop", "restart", "status", "forget"} {
		cfg.Endpoints = append(cfg.Endpoints, bus.Endpoint{Name: "runtime-" + verb, Subject: r.subj.Runtime(verb),
			Handler: bus.JSONHandler(r.log, r.runtimeHandler(verb))})
	}
	cfg.Endpoints = r.ownReplies(cfg.Endpoints)
	svc, err := bus.StartService(r.nc, cfg)
	if err != nil {
		return err
	}
	r.svc = svc
	return nil
}

func (r *Runner) handleToolsList(ctx context.Context, req micro.Request) (any, error) {
	var in model.ToolsListRequest
	if err := bus.Decode(req.Data(), &in); err != nil {
		return nil, err
	}
	c, _, err := r.admitted(req.Subject())
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := model.ToolsListReply{Tools: []model.Tool{}}
	if in.Server != "" {
		if !model.ValidSlug(in.Server) {
			return nil, apierr.Invalid("server", "server must be a slug ([a-z0-9_-])")
		}
		out.Tools = append(out.Tools, r.visibleTools(c, r.catalog[in.Server].Tools)...)
		return out, nil
	}
	for _, slug := range sortedKeys(r.catalog) {
		out.Tools = append(out.Tools, r.visibleTools(c, r.catalog[slug].Tools)...)
	}
	return out, nil
}

// ownerProbeTimeout bounds the status probe sent to a server's owner before a
// start, stop or restart.
const ownerProbeTimeout = 2 * time.Second

// runtimeHandler answers mcp.v1.runtime.<verb>: any runner takes the request,
// checks the config, and forwards it to the server's owner on its control subject.
func (r *Runner) runtimeHandler(verb string) func(context.Context, micro.Request) (any, error) {
	return func(ctx context.Context, req micro.Request) (any, error) {
		var in model.RuntimeRequest
		if err := bus.Decode(req.Data(), &in); err != nil {
			return nil, err
		}
		if in.Server == "" {
			if verb != "status" {
				return nil, apierr.Invalid("server", "server is required")
			}
			return r.allStatus(), nil
		}
		if !model.ValidSlug(in.Server) {
			return nil, apierr.Invalid("server", "server must be a slug ([a-z0-9_-])")
		}
		if (verb == "forget") != (in.Principal != "") {
			return nil, apierr.Invalid("principal", "principal is required by forget, and only there")
		}
		if in.IfRunning && verb != "restart" {
			return nil, apierr.Invalid("if_running", "if_running is for restart only")
		}
		cfg, err := r.configBySlug(ctx, in.Server)
		if err != nil {
			return nil, err
		}
		if !cfg.Enabled {
			if verb == "status" || verb == "stop" || verb == "forget" {
				return model.Status{Server: cfg.Slug, State: model.StateDisabled, UpdatedAt: time.Now().UTC()}, nil
			}
			return nil, apierr.Newf(apierr.Conflict, "server %s is disabled; enable it first", cfg.Slug)
		}
		timeout := cfg.Runtime.StartTimeout.Or(r.opts.StartTimeout) + r.opts.StopTimeout + r.opts.StopGrace + 5*time.Second
		if ct := bus.CallerTimeout(nats.Header(req.Headers())); ct > 0 && ct < timeout {
			timeout = ct // never work longer than the caller waits
		}
		control := func(verb string, timeout time.Duration) (*nats.Msg, error) {
			msg := nats.NewMsg(r.subj.Control(cfg.Slug))
			msg.Header.Set(bus.HeaderRequestID, req.Headers().Get(bus.HeaderRequestID)) // one id end to end
			msg.Data, _ = json.Marshal(controlRequest{Verb: verb, Principal: in.Principal, IfRunning: in.IfRunning})
			reply, err := bus.Request(ctx, r.nc, msg, timeout)
			if apierr.Of(err) == apierr.ServiceUnavailable && errors.Is(err, nats.ErrNoResponders) {
				return nil, apierr.Newf(apierr.ServiceUnavailable, "no runner owns server %s", cfg.Slug)
			}
			return reply, err
		}
		if verb == "start" || verb == "stop" || verb == "restart" {
			// They mean the server: every replica does them (the control
			// subject would reach one, the others kept running, or kept
			// the secrets a restart was to replace).
			st, ok, err := r.controlEach(ctx, cfg.Slug, controlRequest{Verb: verb, IfRunning: in.IfRunning}, req.Headers().Get(bus.HeaderRequestID), timeout)
			if ok || err != nil {
				return st, err
			}
			// No replica answers there: runners of an older build serve
			// only the control subject.
		}
		if verb == "status" {
			timeout = ownerProbeTimeout // an owner answers a status at once
		} else {
			// "No responders" only tells that nobody serves the server when no
			// one else listens: a monitoring subscriber on ">" hides it, and a
			// start would then wait its whole timeout. A status answers at once
			// from a serving owner, so ask it first with a short timeout.
			probe, err := control("status", ownerProbeTimeout)
			if err != nil {
				if apierr.Of(err) == apierr.Network {
					return nil, apierr.Newf(apierr.ServiceUnavailable, "no runner owns server %s (no answer within %s)", cfg.Slug, ownerProbeTimeout)
				}
				return nil, err
			}
			// An older build's replica restarts whatever its state.
			var st model.Status
			if in.IfRunning && json.Unmarshal(probe.Data, &st) == nil && !model.NeedsRestartForSecrets(st.State) {
				return probe.Data, nil
			}
		}
		reply, err := control(verb, timeout)
		if err != nil {
			if verb == "status" && apierr.Of(err) == apierr.Network {
				return nil, apierr.Newf(apierr.ServiceUnavailable, "no runner owns server %s (no answer within %s)", cfg.Slug, ownerProbeTimeout)
			}
			return nil, err
		}
		return reply.Data, nil
	}
}

// cachedCatalog returns the last stored tool list of a server.
func (r *Runner) cachedCatalog(slug string) (model.Catalog, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.catalog[slug]
	return c, ok && len(c.Tools) > 0
}

// configBySlug finds a config in the bucket (the source of truth, not this
// runner's view, so any runner answers the same).
func (r *Runner) configBySlug(ctx context.Context, slug string) (*model.McpConfig, error) {
	r.mu.Lock()
	if s, ok := r.servers[slug]; ok {
		cfg := s.config()
		r.mu.Unlock()
		return cfg, nil
	}
	r.mu.Unlock()
	lister, err := r.assets.Configs.ListKeys(ctx)
	if err != nil {
		return nil, apierr.Wrap(apierr.ServiceUnavailable, "reading configs", err)
	}
	defer func() { _ = lister.Stop() }()
	for key := range lister.Keys() {
		e, err := r.assets.Configs.Get(ctx, key)
		if err != nil {
			continue
		}
		var cfg model.McpConfig
		if json.Unmarshal(e.Value(), &cfg) == nil {
			cfg.Normalize()
			if cfg.Slug == slug {
				return &cfg, nil
			}
		}
	}
	return nil, apierr.Newf(apierr.NotFound, "server %s not found", slug)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sortStrings(keys)
	return keys
}

// workerIdle is how long an idle worker of the pool lives on: long enough to
// span the gaps of a steady caller, short enough to give back a burst's.
const workerIdle = 10 * time.Second

// discardLogger silences the worker pool, which logs only what the runner
// reports itself (a panic is recovered in the request's own handler).
type discardLogger struct{}

func (discardLogger) Printf(string, ...any) {}
