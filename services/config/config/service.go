package config

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/mcpbus/mcpbus/libs/audit"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// Version of the config service (micro requires semver).
const Version = "0.1.0"

// ServiceName is the micro name (and queue group) of the config service.
const ServiceName = "mcpbus-config"

// Verbs are the endpoints of the service: mcp.v1.config.<verb>.
var Verbs = []string{"create", "get", "list", "update", "delete", "enable", "disable",
	"import", "export", "history", "rollback"}

// Options configure the service. Zero values take the defaults.
type Options struct {
	Prefix string
	Logger *slog.Logger
	// Audit appends the audited events to the service's audit chains (nil:
	// none, on a bus without identities); Build makes it, Run closes it.
	Audit *audit.Writer
	// StartTimeout bounds how long enable waits for a runner to start the
	// server (default 90s); a config's runtime.start_timeout + 30s overrides it.
	StartTimeout time.Duration
	// CheckKeyfiles makes create and update check keyfile paths on this host
	// (exists, regular, not world-readable): right when the runners share the
	// host, as in the all-in-one `mcpbus up`.
	CheckKeyfiles bool
	// Replicas of the shared JetStream assets (default 1).
	Replicas int
	// EventsMaxBytes and AuditMaxBytes bound the shared streams
	// (bus.AssetOptions; 0: the defaults; mcpbus up sets them from its NATS
	// storage).
	EventsMaxBytes, AuditMaxBytes int64
	// RequestTimeout bounds one request to the credential service (default 10s).
	RequestTimeout time.Duration
	// OpTimeout bounds one request to this service, enable's wait excepted (default 30s).
	OpTimeout time.Duration
	// ReservationGrace is how long a slug reservation whose config was never
	// written counts as a create in progress rather than a leftover (default 1m).
	ReservationGrace time.Duration
	// ShutdownGrace is how long Run waits for requests in progress when it
	// stops (default 10s).
	ShutdownGrace time.Duration
}

func (o *Options) defaults() {
	if o.Prefix == "" {
		o.Prefix = bus.DefaultPrefix
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	setDefault(&o.StartTimeout, DefaultStartTimeout)
	setDefault(&o.RequestTimeout, 10*time.Second)
	setDefault(&o.OpTimeout, 30*time.Second)
	setDefault(&o.ReservationGrace, time.Minute)
	setDefault(&o.ShutdownGrace, 10*time.Second)
}

func setDefault(d *time.Duration, def time.Duration) {
	if *d <= 0 {
		*d = def
	}
}

// Service is the config service.
type Service struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	subj bus.Subjects
	opts Options
	log  *slog.Logger

	assets *bus.Assets
	svc    micro.Service
	ready  chan struct{}

	// life is cancelled when Run stops: waits in progress (enable) give up.
	life     context.Context
	stopLife context.CancelFunc
	inflight sync.WaitGroup

	// policies caches the runners' exec policies briefly (policy.go).
	policies policyCache

	// events are the config events waiting for MCP_EVENTS (publishEvents).
	events chan *event
}

// New prepares the service on nc. Run starts it.
func New(nc *nats.Conn, opts Options) (*Service, error) {
	opts.defaults()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("config: jetstream: %w", err)
	}
	life, stop := context.WithCancel(context.Background())
	return &Service{
		nc: nc, js: js, subj: bus.NewSubjects(opts.Prefix), opts: opts,
		log:   opts.Logger,
		ready: make(chan struct{}), life: life, stopLife: stop,
		events: make(chan *event, eventQueue),
	}, nil
}

// Ready is closed once the endpoints answer.
func (s *Service) Ready() <-chan struct{} { return s.ready }

// Run serves until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	// Events still queued get a bounded moment to reach their chain.
	defer s.opts.Audit.Close(2 * time.Second)
	defer s.stopLife()
	assets, err := bus.EnsureAssets(ctx, s.js, s.subj, bus.AssetOptions{Replicas: s.opts.Replicas, Logger: s.log,
		EventsMaxBytes: s.opts.EventsMaxBytes, AuditMaxBytes: s.opts.AuditMaxBytes})
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	// Every write is a caller's request: ride out a leader election within its deadline.
	s.assets = assets.Retrying()
	// Events go out after the requests that made them have stopped (below),
	// each within its deadline, then within eventDrain.
	evCtx, evCancel := context.WithCancel(context.Background())
	defer evCancel()
	evStop, evFinished := make(chan struct{}), make(chan struct{})
	go s.publishEvents(evCtx, evStop, evFinished)
	defer func() {
		close(evStop)
		t := time.AfterFunc(eventDrain, evCancel)
		defer t.Stop()
		<-evFinished
	}()
	handlers := map[string]bus.HandlerFunc{
		"create": s.handleCreate, "get": s.handleGet, "list": s.handleList, "update": s.handleUpdate,
		"delete": s.handleDelete, "enable": s.handleEnable, "disable": s.handleDisable,
		"import": s.handleImport, "export": s.handleExport, "history": s.handleHistory, "rollback": s.handleRollback,
	}
	cfg := bus.ServiceConfig{Name: ServiceName, Version: Version,
		Description: "mcpbus config: McpConfig records, enable/disable, import/export, history"}
	for _, verb := range Verbs {
		cfg.Endpoints = append(cfg.Endpoints, bus.Endpoint{Name: "config-" + verb,
			Subject: s.subj.Service("config", verb), Handler: bus.JSONHandler(s.log, s.track(handlers[verb]))})
	}
	// One queue group: instances share the work.
	if s.svc, err = bus.StartService(s.nc, cfg); err != nil {
		return err
	}
	close(s.ready)
	s.log.Info("config service started", "prefix", s.subj.Prefix)
	<-ctx.Done()
	s.log.Info("config service stopping")
	_ = s.svc.Stop()
	s.stopLife()
	done := make(chan struct{})
	go func() { s.inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(s.opts.ShutdownGrace):
		s.log.Warn("config service stopped with requests still in progress")
	}
	return nil
}

// track counts requests in progress (Run waits for them) and gives each the
// service's lifetime as its cancellation.
func (s *Service) track(h bus.HandlerFunc) bus.HandlerFunc {
	return func(ctx context.Context, req micro.Request) (any, error) {
		s.inflight.Add(1)
		defer s.inflight.Done()
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(s.life, cancel)
		defer stop()
		return h(ctx, req)
	}
}

// opCtx bounds one operation.
func (s *Service) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.opts.OpTimeout)
}

const (
	// eventTimeout bounds the publish of one config event, retries included.
	eventTimeout = 15 * time.Second
	// eventWait is how long a write's answer waits for its event to be
	// stored: a fraction of the callers' config timeout (libs/client: 15 s),
	// so that an events stream missing or electing a leader does not make a
	// write that was made look failed. The event goes on after the answer.
	eventWait = 2 * time.Second
	// eventDrain is what the events still queued get when Run stops.
	eventDrain = 2 * time.Second
	// eventQueue is how many events may wait for the stream; more are dropped.
	eventQueue = 1024
)

// event is one config event queued for MCP_EVENTS; done is closed once it
// is stored or given up.
type event struct {
	subject, msgID string
	data           []byte
	slug, typ      string
	until          time.Time
	done           chan struct{}
}

// publish emits a config event (emit) and waits for it briefly (awaitEvent).
// The change is already made, so a failure is logged, not returned.
func (s *Service) publish(typ string, cfg *model.McpConfig, requestID string) {
	s.awaitEvent(s.emit(typ, cfg, requestID))
}

// emit queues a config event for MCP_EVENTS (and appends it to the audit
// chain). One queue per instance, published in order by publishEvents: a
// late event never lets a later one of this instance overtake it. The
// returned channel is closed once the event is stored or given up.
func (s *Service) emit(typ string, cfg *model.McpConfig, requestID string) <-chan struct{} {
	ev := model.ConfigEvent{Type: typ, Server: cfg.Slug, ID: cfg.ID, Revision: cfg.Revision, Version: cfg.Version,
		Enabled: cfg.Enabled, RequestID: requestID, At: time.Now().UTC()}
	done := make(chan struct{})
	data, err := json.Marshal(ev)
	if err != nil {
		s.log.Error("encoding config event", "error", err)
		close(done)
		return done
	}
	subject := s.subj.Event("config", cfg.Slug)
	s.opts.Audit.Append(subject, data)
	q := &event{subject: subject, data: data, slug: cfg.Slug, typ: typ, done: done,
		msgID: fmt.Sprintf("config.%s.%s.%d.%d", typ, cfg.ID, cfg.Revision, ev.At.UnixNano()),
		until: time.Now().Add(eventTimeout)}
	select {
	case s.events <- q:
	default:
		s.log.Warn("config event dropped: too many wait for the events stream", "server", cfg.Slug, "type", typ)
		close(done)
	}
	return done
}

// awaitEvent waits for an emitted event eventWait at most.
func (s *Service) awaitEvent(done <-chan struct{}) {
	if done == nil {
		return
	}
	t := time.NewTimer(eventWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// publishEvents publishes the queued events one after another, each retried
// through a leader election (bus.Retry) until its own deadline (eventTimeout
// after it was emitted) and acknowledged by the stream. The message id lets
// the stream drop the copy of a retried try whose first try was stored
// unanswered. Once stop is closed it publishes what is queued within ctx
// (which ends eventDrain later) and returns.
func (s *Service) publishEvents(ctx context.Context, stop <-chan struct{}, finished chan<- struct{}) {
	defer close(finished)
	send := func(ev *event) {
		defer close(ev.done)
		pctx, cancel := context.WithDeadline(ctx, ev.until)
		defer cancel()
		err := bus.Retry(pctx, func(ctx context.Context, _ int) error {
			_, err := s.js.Publish(ctx, ev.subject, ev.data, jetstream.WithMsgID(ev.msgID))
			return err
		})
		if err != nil {
			s.log.Warn("publishing config event failed", "server", ev.slug, "type", ev.typ, "error", err)
		}
	}
	for {
		select {
		case ev := <-s.events:
			send(ev)
		case <-stop:
			for {
				select {
				case ev := <-s.events:
					send(ev)
				default:
					return
				}
			}
		}
	}
}

// requestID is the caller's request id, carried into events and logs.
func requestID(req micro.Request) string {
	return req.Headers().Get(bus.HeaderRequestID)
}
