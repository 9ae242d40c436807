package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os/exec"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go/micro"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/netguard"
	"github.com/mcpbus/mcpbus/libs/telemetry/conv"
	"github.com/mcpbus/mcpbus/services/runner/internal/launch"
)

// server is one managed MCP server. Lifecycle changes run one at a time on
// its own goroutine (ops), so a slow start never blocks another server;
// calls read the live session under mu and run concurrently.
type server struct {
	r    *Runner
	slug string
	log  *slog.Logger
	// stderr relays the server's stderr lines to log, bounded.
	stderr *stderrLog
	// refreshFails bounds the records of failed tool re-lists.
	refreshFails *logBudget

	ctx    context.Context // cancelled when the server is removed
	cancel context.CancelFunc
	ops    chan func()
	done   chan struct{}

	svc        micro.Service
	callPrefix string // "<prefix>.call.<slug>."

	mu    sync.RWMutex
	cfg   *model.McpConfig
	state string
	// booted: the server's lifecycle began here (boot ran, or a state was
	// set). Until then state is newServer's "stopped", which means "boot
	// still to come", not "stopped on purpose" (runtime.stop): calls take
	// it as idle (live), so one that arrives between serve and boot starts
	// the server instead of being refused.
	booted    bool
	lastErr   *apierr.Error
	sess      *mcp.ClientSession
	raw       launch.RawConn // sess's connection, for raw tool calls
	proc      *launch.Process
	tools     map[string]*mcp.Tool // by subject token
	schemas   schemaCache          // of tools' input schemas (argschema.go)
	startedAt time.Time
	retryAt   time.Time // when the pending automatic restart runs
	gen       uint64    // session generation: a stale exit notice is ignored
	// restartCuts are the last sessions stopped to restart the server in
	// place (restartInPlace: a changed config, a requested restart): a call
	// that fails on one of them says so, not "EOF" (bounded: those calls end
	// with the stop).
	restartCuts []restartCut

	// redactor hides this server's secrets in the error messages of call
	// events and in recorded tool content (when the operator opts in to it).
	redactor atomic.Value // launch.Redactor

	progress sync.Map // progress token → subject of the caller
	clients  clientTargets
	relays   relayGroups
	// client is the go-sdk client of every session of this server: its
	// handlers relay server-to-client requests, and it holds the roots.
	client *mcp.Client
	// principals are the per-principal sessions of an auth.per_principal
	// server (perprincipal.go).
	principals principalSessions
	inflight   sync.Map // caller.inflightKey(request id) → context.CancelFunc
	shares     sync.Map // agent name → *atomic.Int64: its calls in flight (takeShare)
	calls      atomic.Uint64
	errs       atomic.Uint64
	// toolsRefresh bounds the re-reads list_changed asks for (coalesce.go).
	toolsRefresh coalescer
	// subs are the resources the gateway's clients subscribed to, lists the
	// server's own list changes passed on (resourcesubs.go).
	subs  resourceSubs
	lists listNotices

	// Lifecycle bookkeeping (see lifecycle.go). attempts and retry belong to
	// the server's goroutine; the atomics are read by calls and the maintenance loop.
	attempts int // consecutive automatic restarts
	// roomWaits counts the starts in a row refused at the runner's server
	// limit (waitForRoom), for their backoff.
	roomWaits int
	// credWaits counts the starts in a row that could not read the
	// server's secrets (waitForCredentials), for their backoff.
	credWaits int
	// failedFirst: the series began with a start that failed (not a crash
	// of a server that ran), so that spawn counts as one of MaxRestarts.
	failedFirst bool
	retry       *time.Timer // pending automatic restart
	// abortOp (under mu) ends the start or the tool list re-read under
	// way, nil when none is: a stop asked for meanwhile queues behind it on
	// the server's goroutine, and a server that never answers its handshake
	// or its tools/list holds it for the whole start or call timeout (60 s
	// and 30 s by default, more when raised), longer than the CLI or the
	// runtime request waits for the stop.
	abortOp context.CancelCauseFunc
	// waitingRoom: retry is a try for room (waitForRoom), which a slot
	// freed on the runner runs at once (slotFreed).
	waitingRoom atomic.Bool
	// roomSince is when the server began waiting for room (unix ns, 0:
	// not waiting), kept across the tries until one takes a slot: the
	// ownership pass hands over only a server that waited a lease period.
	roomSince atomic.Int64
	// withheld are the tools (by token) whose definition changed since it
	// was pinned and which strict pinning keeps from callers, with why
	// (pins.go); accepted is the definition hash last accepted per pin key.
	withheld map[string]string
	accepted sync.Map
	// pinBudget bounds the pins the server's tools may write and the
	// tool_changed events they may publish (pins.go): a server renaming
	// its tools in a loop would otherwise fill the pin bucket and push
	// real records out of the event and audit streams.
	pinBudget       *rate.Limiter
	pinBudgetWarned atomic.Bool
	// lastStart is the span of the last start that ran and when it ended,
	// so a call or control request that waited behind it can link to it.
	lastStart lastStart
	restarts  atomic.Uint64
	active    atomic.Int64 // calls in flight
	lastUse   atomic.Int64 // unix nanos of the last call
	lastPing  atomic.Int64 // unix nanos of the last proof of life
	pingFails atomic.Int32
	pinging   atomic.Bool

	publishedCalls atomic.Uint64 // calls counted in the last status written
	publishedAt    atomic.Int64

	// lost is set when another runner may own the server now (its lease is
	// gone): the status is no longer this runner's to write.
	lost atomic.Bool
	// leaseEnd is when this runner's lease of the server ends unless renewed
	// (nil in tests that build a server without a lease). A call
	// that arrives later is refused (leaseLive): a runner frozen or starved
	// past its lease reads the calls queued meanwhile before its renewal
	// or expiry check runs, and another runner owns the server by then.
	leaseEnd atomic.Pointer[time.Time]
	// progressSeen counts, per session, the progress notifications go-sdk
	// handed to onProgress (*mcp.ClientSession → *atomic.Uint64; calls.go:
	// progressCaughtUp).
	progressSeen sync.Map
}

func newServer(r *Runner, cfg *model.McpConfig) *server {
	ctx, cancel := context.WithCancelCause(context.Background())
	s := &server{
		r: r, slug: cfg.Slug, cfg: cfg, state: model.StateStopped,
		log: r.log.With("server", cfg.Slug),
		// A call ended by this, not by its caller, says so (callError).
		ctx: ctx, cancel: func() { cancel(errServerClosed) },
		ops: make(chan func(), 16), done: make(chan struct{}),
		callPrefix: r.subj.Call(cfg.Slug, ""),
		pinBudget:  newPinBudget(r.opts.PinBudget),
	}
	s.stderr = newStderrLog(s.log)
	s.refreshFails = newLogBudget(rate.Every(refreshFailEvery), 1)
	s.client = mcp.NewClient(&mcp.Implementation{Name: "mcpbus-runner", Version: Version}, &mcp.ClientOptions{
		Capabilities: clientCapabilities(),
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			s.toolsRefresh.notify(toolsRefreshEvery, func() { s.post(s.refreshTools) })
		},
		PromptListChangedHandler:      func(context.Context, *mcp.PromptListChangedRequest) { s.onListChanged(model.ListPrompts) },
		ResourceListChangedHandler:    func(context.Context, *mcp.ResourceListChangedRequest) { s.onListChanged(model.ListResources) },
		ResourceUpdatedHandler:        s.onResourceUpdated,
		ProgressNotificationHandler:   s.onProgress,
		ElicitationHandler:            s.onElicit,
		CreateMessageWithToolsHandler: s.onCreateMessage,
	})
	syncRoots(s.client, nil, cfg.Roots)
	go s.loop()
	return s
}

// loop runs the server's lifecycle operations until close's stop, the
// last: done is checked first, so nothing queued behind it runs (a start
// would spawn a child nobody stops).
func (s *server) loop() {
	for {
		select {
		case <-s.done:
			return
		default:
		}
		select {
		case op := <-s.ops:
			op()
		case <-s.done:
			return
		}
	}
}

// do runs op on the server's goroutine and waits for it.
func (s *server) do(op func() error) error {
	res := make(chan error, 1)
	select {
	case s.ops <- func() { res <- op() }:
	case <-s.done:
		return s.gone()
	}
	select {
	case err := <-res:
		return err
	case <-s.done:
		return s.gone()
	}
}

// gone is the error of a request to a server closed here.
func (s *server) gone() *apierr.Error {
	return apierr.Newf(apierr.ServiceUnavailable, "server %s is no longer managed here", s.slug)
}

// post queues op without waiting (used from go-sdk callbacks).
func (s *server) post(op func()) {
	go func() {
		select {
		case s.ops <- op:
		case <-s.done:
		}
	}()
}

func (s *server) config() *model.McpConfig {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.cfg
}

// setConfig installs a new revision and reports whether the running process
// must restart for it (anything that changes how it is launched or which
// credentials it gets) and whether only the tool filter changed the catalog.
func (s *server) setConfig(cfg *model.McpConfig) (restart, filterChanged bool) {
	s.mu.Lock()
	old := s.cfg
	s.cfg = cfg
	s.mu.Unlock()
	if !reflect.DeepEqual(old.Roots, cfg.Roots) {
		syncRoots(s.client, old.Roots, cfg.Roots) // running sessions hear of it: no restart
	}
	restart = !reflect.DeepEqual(old.Package, cfg.Package) || !reflect.DeepEqual(old.Transport, cfg.Transport) ||
		!reflect.DeepEqual(old.EnvVars, cfg.EnvVars) || old.AuthType != cfg.AuthType ||
		old.Runtime.StartTimeout != cfg.Runtime.StartTimeout
	return restart, !reflect.DeepEqual(old.Tools, cfg.Tools)
}

// start follows docs/design.md: check enabled → resolve credentials → build env →
// spawn or connect → handshake → list tools → running. It runs in the span
// "start {server}", a child of the span in cause (the call or control
// request that asked for it; none for a takeover or an automatic restart).
// cause only parents the span: the start is bounded by the server's own
// context and its start timeout, not by the caller's.
func (s *server) start(cause context.Context) (err error) {
	s.mu.RLock()
	state, cfg := s.state, s.cfg
	s.mu.RUnlock()
	if state == model.StateRunning {
		return nil
	}
	if s.ctx.Err() != nil {
		return s.gone() // queued before close's stop: the server is going away
	}
	if !cfg.Enabled {
		return apierr.Newf(apierr.Conflict, "server %s is disabled", s.slug)
	}
	ctx, span := s.r.telemetry.tracer.Start(trace.ContextWithSpan(s.ctx, trace.SpanFromContext(cause)), "start "+s.slug,
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(conv.MCPBusServer.String(s.slug), conv.MCPBusRunner.String(s.r.opts.ID), conv.MCPBusPackageType.String(model.ExecType(cfg))))
	defer func() { s.endStart(span, err) }()
	// The exec policy: a refused config is never spawned nor connected.
	launchCfg, refused := s.r.checkExec(cfg)
	if refused != nil {
		s.setState(model.StateError, refused)
		s.log.Warn("server not started: refused by this runner's exec policy", "code", refused.Code, "error", refused.Message)
		return refused
	}
	n, ok := s.r.takeSlot()
	if !ok {
		e := apierr.Wrap(apierr.ServiceUnavailable, fmt.Sprintf("runner %s already runs %d servers, its limit (max servers); try again when one goes idle", s.r.opts.ID, n), errAtLimit).WithField(model.StatusFieldMaxServers)
		if state != model.StateIdle { // an idle server stays idle: its next call tries again
			s.waitForRoom(e)
		}
		return e
	}
	// Under way: a pending automatic start is moot (a failure arms its own).
	s.cancelRetry()
	s.roomWaits = 0
	s.roomSince.Store(0)
	s.setState(model.StateStarting, nil)
	cctx, done := s.interruptible(ctx)
	sess, raw, proc, tools, err := s.connect(cctx, launchCfg)
	done() // cctx ends here: what follows uses ctx
	if err != nil && errors.Is(context.Cause(cctx), errInterrupted) && s.ctx.Err() == nil {
		// Ended by a stop or a restart, which runs next: no retry is armed
		// and no error shown; stopped meanwhile, so that a call queued
		// before that stop starts nothing (a restart starts anew).
		s.r.slotFreed()
		by := "stopped"
		if errors.Is(context.Cause(cctx), errRestartRequested) {
			by = "restarted"
		}
		s.log.Info("server start interrupted", "by", context.Cause(cctx))
		s.setState(model.StateStopped, nil)
		return apierr.Newf(apierr.ServiceUnavailable, "server %s was %s during its start", s.slug, by)
	}
	if err != nil {
		s.r.slotFreed()
		e := apierr.From(err)
		s.log.Warn("server failed to start", "code", e.Code, "error", e.Message)
		var noCreds credentialsUnavailable
		if errors.As(err, &noCreds) {
			s.waitForCredentials(e)
			return e
		}
		if s.attempts == 0 {
			s.failedFirst = true
		}
		if retryable(e) {
			s.scheduleRestart(e)
		} else {
			s.setState(model.StateError, e)
		}
		return e
	}
	withheld := s.withheldOf(ctx, tools)
	now := time.Now().UnixNano()
	s.lastUse.Store(now)
	s.lastPing.Store(now)
	s.pingFails.Store(0)
	s.mu.Lock()
	s.sess, s.raw, s.proc = sess, raw, proc
	s.gen++
	gen := s.gen
	s.tools, s.withheld = tools, withheld
	s.startedAt = time.Now().UTC()
	s.mu.Unlock()
	s.publishCatalog()
	s.credWaits = 0
	s.setState(model.StateRunning, nil)
	s.log.Info("server running", "tools", len(tools), "pid", pidOf(proc))
	go s.watch(sess, gen)
	go s.resubscribe(sess)
	return nil
}

// connect spawns or connects the server of cfg and lists its tools, within
// the start timeout; ctx carries the start's span (its events mark each step).
func (s *server) connect(ctx context.Context, cfg *model.McpConfig) (*mcp.ClientSession, launch.RawConn, *launch.Process, map[string]*mcp.Tool, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.Runtime.StartTimeout.Or(s.r.opts.StartTimeout))
	defer cancel()
	span := trace.SpanFromContext(ctx)
	env, headers, oauth, secrets, err := s.r.buildEnvironment(ctx, cfg)
	if err != nil {
		if e := refusedCredentials(err); e != nil {
			return nil, nil, nil, nil, e
		}
		return nil, nil, nil, nil, err
	}
	span.AddEvent("credentials resolved")
	var upAuth upstreamAuth
	if cfg.Transport.Type == model.TransportHTTP {
		if err := s.tokenForURL(cfg, oauth); err != nil {
			return nil, nil, nil, nil, err
		}
		upAuth, headers = s.r.upstreamAuthFor(cfg, oauth, headers)
	}
	if len(headers) > 0 {
		c := *cfg
		c.Transport.Headers = mergeMaps(cfg.Transport.Headers, headers)
		cfg = &c
	}
	lopts := s.r.opts.Launch
	lopts.OnStderr, lopts.StderrWanted = s.stderr.line, s.stderr.wanted
	lopts.Secrets = secrets // redacted from those lines
	lopts.Sandbox, lopts.Protected = s.r.sandbox, s.r.childProtected()
	if cfg.Transport.Type == model.TransportHTTP {
		lopts.Auth = upAuth
	}
	// Run once the child has started (inside Connect, before the
	// handshake): only then has it a pid to record and to trace.
	lopts.OnSpawn = func(p *launch.Process) {
		span.AddEvent("spawned", trace.WithAttributes(conv.ProcessPID.Int(p.PID())))
		if s.r.pids == nil {
			return
		}
		if err := s.r.pids.Record(s.slug, p.PID(), p.Marker()); err != nil {
			s.log.Warn("recording the pid failed", "error", err)
		}
	}
	// Call events (and tool content on traces, when recorded) never carry them either.
	s.redactor.Store(launch.NewRedactor(secrets))
	s.r.secrets.set(s.slug, secrets) // caught in every server's calls (secrets.go)
	l, err := launch.Prepare(ctx, cfg, env, lopts)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	// go-sdk waits for a failed child to exit after closing its stdin; a child
	// that never answered may never exit, so the start deadline kills its group.
	if l.Process != nil {
		stopKill := context.AfterFunc(ctx, l.Process.Abort)
		defer stopKill()
	}
	sess, err := s.client.Connect(ctx, tracedTransport{l.Transport}, nil)
	if err != nil {
		s.kill(l.Process)
		s.forgetPid()
		return nil, nil, nil, nil, s.scrubError(s.startError(ctx, err, l.Process), launch.Redactor{})
	}
	// For an npm package the time from spawned to here is mostly npx
	// installing it (a cold cache) and node loading it.
	if ir := sess.InitializeResult(); ir != nil {
		span.AddEvent("initialized", trace.WithAttributes(conv.MCPProtocolVersion.String(ir.ProtocolVersion)))
	}
	tools, err := listTools(ctx, sess, s.catalogLimit())
	if err != nil {
		s.stopSession(sess, nil, l.Process)
		s.forgetPid()
		if apierr.Of(err) != apierr.Validation { // over listTools' bounds: said as is
			err = s.startError(ctx, err, l.Process)
		}
		return nil, nil, nil, nil, s.scrubError(err, launch.Redactor{})
	}
	span.AddEvent("tools listed", trace.WithAttributes(attribute.Int("mcpbus.tools", len(tools))))
	return sess, l.Connected(sess), l.Process, tools, nil // the deferred stopKill runs before cancel
}

// startError classifies a failed spawn or handshake into the contract's startup errors.
func (s *server) startError(ctx context.Context, err error, proc *launch.Process) error {
	if e := refusedCredentials(err); e != nil {
		return e // the upstream refused its credentials (401)
	}
	if e := refusedAddress(err); e != nil {
		return e
	}
	switch {
	case errors.Is(err, exec.ErrNotFound):
		return apierr.Wrap(apierr.NotFound, "Package not found", err)
	case proc != nil && proc.PackageMissing():
		return apierr.Wrap(apierr.NotFound, "Package not found", err)
	case proc != nil && proc.InstallUnreachable():
		// npx or docker could not download it: the network, not the server
		// (seeds/002 §11.1 "npx fails"); retried like any network error.
		return apierr.Wrap(apierr.Network, fmt.Sprintf("Failed to install %s. Check network.", s.slug), err)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return apierr.Wrap(apierr.Network, "Handshake timed out", err)
	case errors.Is(ctx.Err(), context.Canceled):
		return apierr.Wrap(apierr.ServiceUnavailable, "start cancelled", err)
	case handshakeRefused(err):
		// The server is there and answered, but wrongly: what it said (its
		// text on one bounded line) tells the operator what to fix.
		return apierr.Wrap(apierr.ServiceUnavailable, "the server failed the handshake: "+s.eventText(err.Error(), model.CallEventErrorMax), err)
	case proc != nil:
		return apierr.Wrap(apierr.ServiceUnavailable, "server exited during the handshake", err)
	}
	return apierr.Wrap(apierr.Network, "could not connect: "+s.serverText(err.Error()), err)
}

// refusedAddress is the contract's error of a remote server installed from
// a registry whose connection netguard refused for its address (its name
// resolves inside), nil for any other error. Not retried: it is the
// config's URL, not an outage.
func refusedAddress(err error) *apierr.Error {
	ie, ok := errors.AsType[*netguard.InternalError](err)
	if !ok {
		return nil
	}
	return apierr.Wrap(apierr.Validation, fmt.Sprintf("transport.url reaches an internal address, %s (%s): %s",
		ie.Address, ie.Class, model.MsgRegistryRemoteInternal), err).WithField("transport.url")
}

// serverText is an error's text for a status or a caller when it may
// quote the server: go-sdk's and net/http's errors quote a session id or a header
// line the server sent whole (up to net/http's 10 MiB of headers), which a
// status, one bus message, must not carry. Redacted before it is cut, so
// the cut cannot split a secret the redactors would catch whole.
func (s *server) serverText(text string) string {
	return s.eventText(s.r.secrets.scrubText(text), model.CallEventErrorMax)
}

// handshakeRefused reports whether err is the server's answer to the
// handshake (an error response, a protocol version go-sdk does not speak,
// an answer it cannot decode) rather than the connection's end.
func handshakeRefused(err error) bool {
	if errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return false
	}
	if _, ok := errors.AsType[*jsonrpc.Error](err); ok {
		return true
	}
	// go-sdk's error type for it is unexported.
	return strings.Contains(err.Error(), "unsupported protocol version")
}

// Bounds of one server's tool list: a server could otherwise page forever,
// or list more than any catalog holds, each re-list (list_changed) again.
const (
	maxToolPages = 1000
	maxTools     = 5000
	maxToolBytes = 16 << 20 // the tools' JSON, all pages together
	// catalogEntryOverhead is what a catalog entry adds to a tool's own
	// JSON besides its namespaced name and subject (counted per tool).
	catalogEntryOverhead = 64
)

// catalogLimit is the most tool JSON the server's catalog may carry: one
// bus message (KV mcp_tools), which would otherwise fail to write and
// leave the previous catalog listed.
func (s *server) catalogLimit() int {
	limit := int(s.r.nc.MaxPayload()) - replyHeadroom
	return min(limit, maxToolBytes)
}

// listTools reads every page of the server's tools, refusing lists past
// the bounds above or whose catalog would be over maxBytes.
func listTools(ctx context.Context, sess *mcp.ClientSession, maxBytes int) (map[string]*mcp.Tool, error) {
	tools := map[string]*mcp.Tool{}
	if sess.InitializeResult() != nil && sess.InitializeResult().Capabilities != nil && sess.InitializeResult().Capabilities.Tools == nil {
		return tools, nil // a server without tools (resources or prompts only)
	}
	var params mcp.ListToolsParams
	size := 0
	for page := 1; ; page++ {
		res, err := sess.ListTools(ctx, &params)
		if err != nil {
			return nil, err
		}
		for _, t := range res.Tools {
			if t == nil {
				continue
			}
			b, _ := json.Marshal(t)
			if len(b) > maxBytes/2 { // a pin under review (and its tool_changed event) holds two definitions in one message
				return nil, apierr.Newf(apierr.Validation, "the server's tool %q is %d KiB: mcpbus takes tools of at most %d KiB", t.Name, len(b)>>10, maxBytes>>11)
			}
			if size += len(b) + 2*len(t.Name) + catalogEntryOverhead; size > maxBytes || len(tools) >= maxTools {
				return nil, apierr.Newf(apierr.Validation, "the server lists more tools than mcpbus takes (at most %d tools, and a catalog of at most %d KiB: one bus message)", maxTools, maxBytes>>10)
			}
			tools[model.ToolToken(t.Name)] = t
		}
		if res.NextCursor == "" {
			return tools, nil
		}
		if page == maxToolPages {
			return nil, apierr.Newf(apierr.Validation, "the server's tool list goes on past %d pages", maxToolPages)
		}
		params.Cursor = res.NextCursor
	}
}

// refreshTools re-reads the tool list after notifications/tools/list_changed.
func (s *server) refreshTools() {
	s.toolsRefresh.started()
	s.mu.RLock()
	sess := s.sess
	s.mu.RUnlock()
	if sess == nil {
		return
	}
	ictx, done := s.interruptible(s.ctx)
	defer done()
	ctx, cancel := context.WithTimeout(ictx, s.r.opts.CallTimeout)
	defer cancel()
	tools, err := listTools(ctx, sess, s.catalogLimit())
	if err != nil {
		if errors.Is(context.Cause(ictx), errInterrupted) {
			return // the stop that ended it runs next
		}
		if ok, _ := s.refreshFails.take(); ok {
			attrs := []any{"error", s.serverText(err.Error())} // it may quote the server
			if n := s.refreshFails.held(); n > 0 {
				attrs = append(attrs, "not_logged", n)
			}
			s.log.Warn("refreshing tools failed", attrs...)
		}
		return
	}
	withheld := s.withheldOf(ctx, tools)
	s.mu.Lock()
	if s.sess != sess {
		s.mu.Unlock()
		return
	}
	// A server may send list_changed without end: a list that did not
	// change writes nothing, else each notice rewrote the catalog (a bus
	// message every watcher reads) and stored a status event.
	if s.state == model.StateRunning && maps.Equal(s.withheld, withheld) && sameTools(s.tools, tools) {
		s.mu.Unlock()
		return
	}
	s.tools, s.withheld = tools, withheld
	s.mu.Unlock()
	s.publishCatalog()
	s.setState(model.StateRunning, nil)
}

// sameTools reports whether a and b list the same tools, by token, each
// with the same definition.
func sameTools(a, b map[string]*mcp.Tool) bool {
	if len(a) != len(b) {
		return false
	}
	for token, t := range a {
		u, ok := b[token]
		if !ok || t == nil || u == nil {
			return false
		}
		ta, err1 := json.Marshal(t)
		tb, err2 := json.Marshal(u)
		if err1 != nil || err2 != nil || !bytes.Equal(ta, tb) {
			return false
		}
	}
	return true
}

// watch notices a session that ends without being asked to (a crash).
func (s *server) watch(sess *mcp.ClientSession, gen uint64) {
	ended := sess.Wait()
	// The connection is gone, but go-sdk releases what the session holds
	// besides it (the goroutine that waits on its subscriptions/listen
	// stream, its keepalive) only on Close: without it each crash left a
	// goroutine behind. Close is idempotent (a stopped session was closed
	// already); on its own goroutine, as a remote server's DELETE or a live
	// child's stop may take a while, and the crash is handled at once.
	go func() { _ = sess.Close() }()
	s.relays.end(sess)
	s.post(func() {
		s.mu.Lock()
		if s.gen != gen || s.sess != sess {
			s.mu.Unlock()
			return
		}
		proc, startedAt := s.proc, s.startedAt
		s.sess, s.raw, s.proc, s.tools = nil, nil, nil, nil
		s.gen++
		s.mu.Unlock()
		s.r.slotFreed()
		s.kill(proc)
		s.forgetPid()
		if time.Since(startedAt) >= s.r.opts.HealthyAfter {
			s.attempts, s.failedFirst = 0, false // it had been healthy long enough: a fresh series of retries
		}
		why := s.endedWhy(proc, ended)
		s.log.Warn("server's session ended unexpectedly", "why", why)
		s.scheduleRestart(apierr.New(apierr.ServiceUnavailable, why))
		// The catalog goes last: a gateway that sees it gone already knows
		// a restart is coming (error with retry_at) and keeps the tools
		// listed; gone first, they left the lists until the status came.
		s.deleteCatalog()
	})
}

// endedWhy says how a session that was not stopped ended, from what its
// connection ended with (err, nil on a plain end of input): a process that
// exited, a connection that failed for another reason (a message over the
// line limit, an unreadable one), or a remote server's session ending. The
// server's own words are bounded and redacted.
func (s *server) endedWhy(proc *launch.Process, err error) string {
	plain := err == nil || errors.Is(err, io.EOF) || errors.Is(err, mcp.ErrConnectionClosed) && strings.Contains(err.Error(), "(it exited)")
	switch {
	case proc != nil && plain:
		return "server process exited unexpectedly"
	case proc != nil:
		return "server process's connection failed: " + s.eventText(err.Error(), model.CallEventErrorMax)
	case plain:
		return "the remote server ended the session"
	}
	return "the remote server's session failed: " + s.eventText(err.Error(), model.CallEventErrorMax)
}

// credentialsRefused ends a session whose upstream refused its credentials
// mid-way (an OAuth refresh refused, a revoked key): the server goes to
// error with UNAUTHORIZED and stays there until it is restarted (after
// `mcpbus servers auth`, or by hand). Runs on the server's goroutine.
func (s *server) credentialsRefused(sess *mcp.ClientSession, e *apierr.Error) {
	s.mu.RLock()
	current := s.sess == sess
	s.mu.RUnlock()
	if !current {
		return
	}
	s.stopWith(model.StateError, e, true) // its tools stay listed; calls get e
	s.log.Warn("server's upstream refused its credentials", "code", e.Code, "error", e.Message)
}

// errInterrupted is the cause of an operation ended by interruptOp;
// errRestartRequested, wrapping it, when a restart asked for it.
var (
	errInterrupted      = errors.New("interrupted by a stop request")
	errRestartRequested = fmt.Errorf("%w (a restart)", errInterrupted)
)

// interruptible is ctx, which interruptOp ends until done is called. Only
// on the server's goroutine, one operation at a time.
func (s *server) interruptible(ctx context.Context) (_ context.Context, done func()) {
	ctx, abort := context.WithCancelCause(ctx)
	s.mu.Lock()
	s.abortOp = abort
	s.mu.Unlock()
	return ctx, func() {
		s.mu.Lock()
		s.abortOp = nil
		s.mu.Unlock()
		abort(nil)
	}
}

// interruptOp ends the start or tool list re-read under way, if any, so
// that a stop or a restart queued behind it runs now instead of after its
// timeout; cause is errInterrupted or errRestartRequested. Called off the
// server's goroutine, before the request queues its operation.
func (s *server) interruptOp(cause error) {
	s.mu.RLock()
	abort := s.abortOp
	s.mu.RUnlock()
	if abort != nil {
		abort(cause)
	}
}

// stop ends the session and the process group; status becomes final. With
// keep, the tool catalog stays (an idle server, or one a stopping runner hands
// over): its tools stay listed and callable, the next call starts it.
func (s *server) stop(final string, keep bool) { s.stopWith(final, nil, keep) }

// stopWith is stop whose final status carries e, in one write: a status
// first written without e would show watchers an error with no reason.
func (s *server) stopWith(final string, e *apierr.Error, keep bool) {
	s.cancelRetry()
	s.roomSince.Store(0) // a later wait for room starts its own period
	s.mu.Lock()
	sess, raw, proc := s.sess, s.raw, s.proc
	s.sess, s.raw, s.proc = nil, nil, nil
	if !keep {
		s.tools = nil
	}
	s.gen++
	// The state goes with the session, not after the stop (which may take
	// StopTimeout): a call that finds no session meanwhile must not be told
	// "server s is running", and one that finds it starting or idle waits
	// for the start that follows (live, liveOrStart). Published below.
	s.state, s.lastErr = final, e
	s.mu.Unlock()
	if sess != nil {
		s.r.slotFreed()
		s.progressSeen.Delete(sess)
		s.stopSession(sess, raw, proc)
		s.forgetPid()
	}
	s.forgetPrincipal("")
	if !keep {
		s.deleteCatalog()
	}
	s.setState(final, e)
}

// stopSession ends a session and its process. go-sdk's Close waits for
// the requests in flight both ways: a relayed elicitation would hold the
// stop (and every control request behind it) until a person answered, so
// the relays end first; an HTTP server that does not answer its calls
// would hold it until their timeouts, so after StopTimeout its connection
// is closed under them (they fail), as a child's is killed.
func (s *server) stopSession(sess *mcp.ClientSession, raw launch.RawConn, proc *launch.Process) {
	if proc != nil {
		s.relays.end(sess)
		proc.Stop(sess.Close, s.r.opts.StopGrace, s.r.opts.StopTimeout)
		return
	}
	s.closeRemote(sess, raw)
}

// closeRemote closes a session of an HTTP server (the shared one or a
// principal's) within twice the stop timeout, as stopSession says.
func (s *server) closeRemote(sess *mcp.ClientSession, raw launch.RawConn) {
	s.relays.end(sess)
	closed := make(chan struct{})
	go func() {
		_ = sess.Close()
		close(closed)
	}()
	for i := range 2 {
		select {
		case <-closed:
			return
		case <-time.After(s.r.opts.StopTimeout):
		}
		if c, ok := raw.(io.Closer); ok && i == 0 {
			go c.Close() // its DELETE of the session may wait too
			continue
		}
		s.log.Warn("the upstream session did not close in time; left to its calls' timeouts", "server", s.slug)
		return
	}
}

func (s *server) forgetPid() {
	if s.r.pids != nil {
		s.r.pids.Remove(s.slug)
	}
}

// kill ends a process group that has no usable session.
func (s *server) kill(proc *launch.Process) {
	if proc != nil {
		proc.Stop(func() error { return nil }, 0, s.r.opts.StopTimeout)
	}
}

// close removes the server: no more calls, process stopped, status final.
func (s *server) close(final string, keep bool) { s.closeWith(final, nil, keep) }

// closeWith is close whose final status carries e.
func (s *server) closeWith(final string, e *apierr.Error, keep bool) {
	s.cancel() // aborts a start in progress
	if s.svc != nil {
		if !s.r.nc.IsConnected() {
			s.r.awayStops.Store(true) // the drain may be replayed (replay.go)
		}
		_ = s.svc.Stop()
	}
	// The stop is the last operation: done closes on the server's
	// goroutine, before it takes another.
	_ = s.do(func() error { s.stopWith(final, e, keep); close(s.done); return nil })
}

func (s *server) setState(state string, e *apierr.Error) {
	s.mu.Lock()
	s.state = state
	s.booted = true
	s.lastErr = e
	if state != model.StateError {
		s.retryAt = time.Time{}
	}
	st := s.statusLocked()
	s.mu.Unlock()
	if s.lost.Load() {
		return // the new owner writes the status; "stopped" here would hide its "running"
	}
	s.r.publishStatus(st)
}

func (s *server) status() model.Status {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.statusLocked()
}

func (s *server) statusLocked() model.Status {
	st := model.Status{
		Server: s.slug, State: s.state, Runner: s.r.opts.ID, UpdatedAt: time.Now().UTC(),
		Calls: s.calls.Load(), Errors: s.errs.Load(), Restarts: s.restarts.Load(),
	}
	if s.state == model.StateRunning || s.state == model.StateIdle {
		st.Tools = make([]string, 0, len(s.tools))
		for _, t := range s.tools {
			if s.cfg.Tools.Allows(t.Name) {
				st.Tools = append(st.Tools, t.Name)
			}
		}
		sortStrings(st.Tools)
		st.StartedAt = s.startedAt
		st.PID = pidOf(s.proc)
	}
	if s.lastErr != nil {
		st.Code, st.Message, st.Field = string(s.lastErr.Code), s.lastErr.Message, s.lastErr.Field
	}
	if s.state == model.StateError {
		st.RetryAt = s.retryAt
	}
	if wanted := replicasOf(s.cfg); wanted > 1 {
		st.ReplicasWanted = wanted
		st.Replicas = s.r.replicasHeld(s.slug)
	}
	return st
}

func pidOf(p *launch.Process) int {
	if p == nil {
		return 0
	}
	return p.PID()
}

func mergeMaps(a, b map[string]string) map[string]string {
	out := make(map[string]string, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}
