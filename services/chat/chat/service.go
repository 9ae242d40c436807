// Package chat is the chat service: it serves mcp.v1.chat.* (conversations,
// approvals, profiles) and drives each turn with the loop engine, one
// instance per conversation at a time (a lease in bus.BucketChatTurns). A
// turn whose instance died is resumed from the conversation log by another.
package chat

import (
	"context"
	"fmt"
	"github.com/mcpbus/mcpbus/libs/audit"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/lostreplies"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
	"github.com/mcpbus/mcpbus/libs/runnerwatch"
	"github.com/mcpbus/mcpbus/services/chat/approvals"
	"github.com/mcpbus/mcpbus/services/chat/conversation"
	"github.com/mcpbus/mcpbus/services/chat/events"
	"github.com/mcpbus/mcpbus/services/chat/loop"
	"github.com/mcpbus/mcpbus/services/chat/profiles"
	"github.com/mcpbus/mcpbus/services/chat/provider"
	"github.com/mcpbus/mcpbus/services/chat/results"
)

// Version of the chat service (micro requires semver).
const Version = "0.1.0"

// ServiceName is the micro name of the chat service.
const ServiceName = "mcpbus-chat"

// Defaults of Options.
const (
	DefaultLeaseTTL       = 15 * time.Second
	DefaultRequestTimeout = 30 * time.Second
)

// Options configure the service. Zero values take the defaults.
type Options struct {
	Prefix   string
	Replicas int
	Logger   *slog.Logger
	// Audit appends the audited events to the service's audit chains (nil:
	// none, on a bus without identities); Build makes it, Run closes it.
	Audit *audit.Writer
	// ID names this instance in the leases of the turns it drives (default
	// a uuid).
	ID string
	// CallTimeout bounds one tool call (default loop.DefaultCallTimeout).
	CallTimeout time.Duration
	// TaskTools are globs of the tools whose calls run as durable tasks
	// (loop.Deps.TaskTools); TaskTimeout bounds the wait for one.
	TaskTools   []string
	TaskTimeout time.Duration
	// ResultBudget is the bytes of a tool result the model sees (default
	// loop.DefaultResultBudget).
	ResultBudget int
	// ApprovalTimeout bounds the wait for an approval (default
	// approvals.DefaultTimeout); then the call is denied.
	ApprovalTimeout time.Duration
	// InputTimeout bounds the wait for the user's answer to a server's
	// request for input (default ApprovalTimeout); then it is cancelled.
	InputTimeout time.Duration
	// LeaseTTL is how long a turn whose instance stopped renewing its lease
	// waits before another instance resumes it (default 15 s).
	LeaseTTL time.Duration
	// LogMaxAge drops conversation entries older than this (0: kept).
	LogMaxAge time.Duration
	// LogMaxBytes and ResultsMaxBytes bound the conversation log and the
	// store of cut tool results (0: conversation.DefaultMaxBytes,
	// results.DefaultMaxBytes; mcpbus up sets them from its NATS storage).
	LogMaxBytes, ResultsMaxBytes int64
	// PrincipalQuotaMiB bounds what one principal's conversations hold of
	// the shared log (0: no bound; quota.go).
	PrincipalQuotaMiB int
	// HTTPClient reaches the model providers (default a plain client).
	HTTPClient *http.Client
}

func (o *Options) defaults() {
	if o.Prefix == "" {
		o.Prefix = bus.DefaultPrefix
	}
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.ID == "" {
		o.ID = uuid.NewString()
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = DefaultLeaseTTL
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{}
	}
}

// Service is the chat service.
type Service struct {
	nc    *nats.Conn
	opts  Options
	subj  bus.Subjects
	log   *slog.Logger
	ready chan struct{}
	// usageLocks serialise this instance's charges of a principal (quota.go).
	usageLocks [usageStripes]sync.Mutex

	// Set up by Run.
	js        jetstream.JetStream
	convs     *conversation.Log
	profiles  *profiles.Store
	approvals *approvals.Approver
	results   *results.Store
	turns     jetstream.KeyValue
	events    *events.Publisher
	engine    *loop.Engine
	keys      *credclient.Resolver

	// running are the turns this instance drives, by conversation.
	mu      sync.Mutex
	running map[string]*drive
	wg      sync.WaitGroup
}

// New prepares the service on nc; Run starts it.
func New(nc *nats.Conn, opts Options) (*Service, error) {
	opts.defaults()
	keys, err := credclient.NewResolver(nc, opts.Prefix)
	if err != nil {
		return nil, fmt.Errorf("chat: %w", err)
	}
	return &Service{nc: nc, opts: opts, subj: bus.NewSubjects(opts.Prefix), log: opts.Logger.With("instance", opts.ID),
		ready: make(chan struct{}), keys: keys, running: map[string]*drive{}}, nil
}

// Ready is closed once the endpoints answer.
func (s *Service) Ready() <-chan struct{} { return s.ready }

// Run serves until ctx ends. Turns still running then stop where they are
// and their leases are marked released, so another instance (or this one
// restarted) resumes them at once; after a crash they lapse instead, and
// are resumed after LeaseTTL.
func (s *Service) Run(ctx context.Context) error {
	// Events still queued get a bounded moment to reach their chain.
	defer s.opts.Audit.Close(2 * time.Second)
	if err := s.open(ctx); err != nil {
		return err
	}
	cfg := bus.ServiceConfig{Name: ServiceName, Version: Version,
		Description: "mcpbus chat: durable agent conversations that call MCP tools over the bus"}
	for verb, h := range s.handlers() {
		cfg.Endpoints = append(cfg.Endpoints, bus.Endpoint{Name: "chat-" + endpointName(verb),
			Subject: s.subj.Service("chat", verb), Handler: bus.JSONHandler(s.log, h)})
	}
	svc, err := bus.StartService(s.nc, cfg)
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.scan(runCtx) }()
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.watchReleased(runCtx) }()
	close(s.ready)
	s.log.Info("chat service started", "prefix", s.subj.Prefix)
	<-ctx.Done()
	err = svc.Stop()
	stop()
	s.stopTurns()
	s.wg.Wait()
	s.events.Close()
	return err
}

// open creates or opens the service's stores and the engine.
func (s *Service) open(ctx context.Context) error {
	js, err := jetstream.New(s.nc)
	if err != nil {
		return fmt.Errorf("chat: jetstream: %w", err)
	}
	s.js = js
	if s.convs, err = conversation.Open(ctx, js, conversation.Options{Prefix: s.opts.Prefix, Replicas: s.opts.Replicas,
		MaxAge: s.opts.LogMaxAge, MaxBytes: s.opts.LogMaxBytes, Logger: s.log}); err != nil {
		return fmt.Errorf("chat: %w", err)
	}
	if s.profiles, err = profiles.Open(ctx, s.nc, profiles.Options{Prefix: s.opts.Prefix, Replicas: s.opts.Replicas, Logger: s.log}); err != nil {
		return fmt.Errorf("chat: %w", err)
	}
	if s.approvals, err = approvals.Open(ctx, s.nc, approvals.Options{Replicas: s.opts.Replicas, Timeout: s.opts.ApprovalTimeout,
		InputTimeout: s.opts.InputTimeout, Logger: s.log}); err != nil {
		return fmt.Errorf("chat: %w", err)
	}
	if s.results, err = results.Open(ctx, js, results.Options{Replicas: s.opts.Replicas, MaxBytes: s.opts.ResultsMaxBytes, Logger: s.log}); err != nil {
		return fmt.Errorf("chat: %w", err)
	}
	if s.turns, err = bus.EnsureKV(ctx, js, jetstream.KeyValueConfig{
		Bucket:      bus.BucketChatTurns,
		Description: "chat: leases of running turns and the cancellations asked of them",
		History:     1,
		Storage:     jetstream.FileStorage,
	}, s.opts.Replicas, s.log); err != nil {
		return fmt.Errorf("chat: %w", err)
	}
	// A send, a cancel or a renewal waits out a leader election within
	// its deadline instead of failing at once.
	s.turns = bus.RetryKV(s.turns)
	s.events = events.New(s.nc, events.Options{Prefix: s.opts.Prefix, Logger: s.log})
	// A tool call whose runner dies ends when the runner's lease does, not
	// at the call's timeout.
	runners := runnerwatch.New()
	s.wg.Add(1)
	go func() { defer s.wg.Done(); runners.FollowWhenThere(ctx, s.nc, s.log) }()
	// Nor does a call whose reply a drop of the connection lost.
	lost, err := lostreplies.New(s.nc, s.opts.Prefix, s.log)
	if err != nil {
		return fmt.Errorf("chat: %w", err)
	}
	s.wg.Add(1)
	go func() { defer s.wg.Done(); lost.Run(ctx) }()
	s.engine = loop.New(loop.Deps{
		Log:          s.convs,
		Tools:        loop.ClientTools{C: client.New(s.nc, client.Options{Prefix: s.opts.Prefix, Tie: client.Ties(runners.Tie, lost.Tie)})},
		Model:        s.model,
		Publish:      s.events.Publish,
		Approver:     s.approvals,
		Inputs:       s.approvals,
		Results:      s.results,
		CallTimeout:  s.opts.CallTimeout,
		TaskTools:    s.opts.TaskTools,
		TaskTimeout:  s.opts.TaskTimeout,
		ResultBudget: s.opts.ResultBudget,
		Logger:       s.log,
	})
	return nil
}

// model makes the model of a profile with its API key, read from the
// credential service (sealed to this instance) for each turn.
func (s *Service) model(p model.Profile) (provider.Model, error) {
	var key string
	if p.HasAPIKey {
		ctx, cancel := context.WithTimeout(context.Background(), DefaultRequestTimeout)
		defer cancel()
		k, err := s.keys.ChatKey(ctx, p.Name)
		if err != nil && apierr.Of(err) != apierr.NotFound {
			return nil, err
		}
		key = k
	}
	if key == "" && p.BaseURL == "" {
		return nil, noKey(p.Name)
	}
	return provider.New(provider.Config{Provider: p.Provider, Model: p.Model, BaseURL: p.BaseURL, APIKey: key, HTTPClient: s.opts.HTTPClient})
}

// noKey is the error of a profile that needs an API key and has none.
func noKey(profile string) error {
	return apierr.Invalid("profile", fmt.Sprintf(
		"profile %s has no API key: set one with `mcpbus profiles edit %s --api-key-stdin` (only a profile with a base_url, a local server, may go without)",
		profile, profile))
}

// handlers are the endpoints by verb (the subject is <prefix>.chat.<verb>).
func (s *Service) handlers() map[string]bus.HandlerFunc {
	send := func(ctx context.Context, req model.ChatSendRequest) (any, error) { return s.Send(ctx, req) }
	cancel := func(ctx context.Context, req model.ChatCancelRequest) (any, error) { return s.Cancel(ctx, req) }
	return map[string]bus.HandlerFunc{
		"send": handle(send), "history": handle(s.History), "list": handle(s.List), "delete": handle(s.handleDelete),
		"cancel": handle(cancel), "approve": handle(s.Approve), "pending": handle(s.Pending), "answer": handle(s.Answer),
		"watch":        handle(s.Watch),
		"profiles.put": handle(s.putProfile), "profiles.get": handle(s.getProfile),
		"profiles.list": handle(s.listProfiles), "profiles.delete": handle(s.deleteProfile),
	}
}

// handle adapts f to an endpoint: the caller's principal read from the
// request's header into ctx (and its span), the body decoded into In
// (unknown fields refused), checked by In's Validate when it has one, the
// work bounded by DefaultRequestTimeout or the caller's deadline.
func handle[In any](f func(ctx context.Context, in In) (any, error)) bus.HandlerFunc {
	return func(ctx context.Context, req micro.Request) (any, error) {
		p, err := principal.FromHeader(nats.Header(req.Headers()))
		if err != nil {
			return nil, err
		}
		principal.Tag(ctx, p)
		ctx = principal.With(ctx, p)
		var in In
		if err := bus.Decode(req.Data(), &in); err != nil {
			return nil, err
		}
		if v, ok := any(&in).(interface{ Validate() *apierr.Error }); ok {
			if e := v.Validate(); e != nil {
				return nil, e
			}
		}
		ctx, cancel := context.WithTimeout(ctx, bus.ReplyWithin(nats.Header(req.Headers()), DefaultRequestTimeout))
		defer cancel()
		return f(ctx, in)
	}
}

// endpointName is a verb as a micro endpoint name (no dots).
func endpointName(verb string) string {
	out := []byte(verb)
	for i, c := range out {
		if c == '.' {
			out[i] = '-'
		}
	}
	return string(out)
}
