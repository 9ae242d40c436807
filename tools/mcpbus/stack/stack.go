// Package stack holds the table of mcpbus services and assembles all of them
// in one process around an embedded NATS server: what `mcpbus up` runs, and
// what end-to-end tests start. The same table gives `mcpbus serve <name>`.
package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/mcpbus/mcpbus/libs/access"
	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/approvals"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/natsconn"
	"github.com/mcpbus/mcpbus/libs/secretfile"
	"github.com/mcpbus/mcpbus/libs/service"
	"github.com/mcpbus/mcpbus/services/chat/chat"
	"github.com/mcpbus/mcpbus/services/chat/conversation"
	"github.com/mcpbus/mcpbus/services/chat/results"
	"github.com/mcpbus/mcpbus/services/config/config"
	"github.com/mcpbus/mcpbus/services/credential/credential"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/services/registry/registry"
	"github.com/mcpbus/mcpbus/services/runner/runner"
)

// Options configure the whole system: the embedded NATS server and each
// service's options (the host fills in Prefix, Logger, Replicas and DataDir).
type Options struct {
	// DataDir holds JetStream's files, the file credential store
	// (DataDir/secrets), admin.key and the runner's pid files.
	DataDir string
	// NATSHost and NATSPort are where the embedded NATS listens (port -1: a
	// free port; InProcessOnly: no listener at all).
	NATSHost      string
	NATSPort      int
	InProcessOnly bool
	// NATSMaxStore is the embedded server's JetStream file storage in bytes
	// (0: nats-server's default, 75% of the data dir's free disk).
	NATSMaxStore int64
	Prefix       string
	Logger       *slog.Logger
	// InsecureBus turns NATS authentication off: anyone who reaches the
	// port may do anything on the bus. Otherwise every service connects as
	// its own identity (DataDir/nats/<role>.nk) with its role's permissions.
	InsecureBus bool
	// ExtraUsers are allowed besides the identities (tests: a superuser
	// that watches all traffic).
	ExtraUsers []*server.NkeyUser

	Credential credential.Options
	Config     config.Options
	Registry   registry.Options
	Runner     runner.Options
	Chat       chat.Options
	// Gateway, when set with an address, serves the HTTP edge (aggregated
	// /mcp, REST API).
	Gateway *gateway.Options
}

// Row is one service of the table with the options it runs with.
type Row struct {
	Def  service.Definition
	Opts service.Options
}

// Table is every mcpbus service, in start order, bound to o's options: the
// one list that builds `mcpbus up` (all rows, one process) and
// `mcpbus serve <name>` (one row). Adding a service is adding its row.
func (o *Options) Table() []Row {
	if o.Gateway == nil {
		o.Gateway = &gateway.Options{} // no address: no gateway
	}
	return []Row{
		{credential.Definition(), &o.Credential},
		{config.Definition(), &o.Config},
		{registry.Definition(), &o.Registry},
		{runner.Definition(), &o.Runner},
		{chat.Definition(), &o.Chat},
		{gateway.Definition(), o.Gateway},
	}
}

// Services are the definitions of the table.
func Services() []service.Definition {
	var o Options
	var defs []service.Definition
	for _, r := range o.Table() {
		defs = append(defs, r.Def)
	}
	return defs
}

// Stack is a running system.
type Stack struct {
	NATS *embednats.Server
	// Conn is a connection for the caller's own use (loading files, tests).
	Conn   *nats.Conn
	Client *client.Client
	Runner *runner.Runner
	// Gateway is the HTTP edge (nil when Options.Gateway has no address).
	Gateway *gateway.Gateway
	// Services are the running services, by name.
	Services map[string]service.Service

	// Identities holds the seeds of the bus identities (nil with InsecureBus).
	Identities *access.Store

	prefix string
	ids    map[access.Role]access.Identity
	extra  []*server.NkeyUser
	agents map[string]agent
	// unpurged are revoked agents whose leftovers (upstream credentials,
	// held calls) are not removed yet: their names are not given again.
	unpurged map[string]bool
	agMu     sync.Mutex
	// hostNC is the host identity's connection (serves agents.*, purges a
	// revoked agent's leftovers); held binds mcp_approvals on it, lazily,
	// or is the gateway's store when it runs here (heldCalls).
	hostNC *nats.Conn
	held   *approvals.Store
	// agentsKV holds the agents' records the runners check (nil on an insecure bus).
	agentsKV jetstream.KeyValue
	log      *slog.Logger
	conns    []*nats.Conn
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	// stopEdge stops the gateway, edge its Run, before the rest stops.
	stopEdge context.CancelFunc
	edge     sync.WaitGroup
	errs     chan error
	once     sync.Once
}

// Start brings every service of the table up around an embedded NATS server
// and returns once they all answer. Each service gets its own in-process
// connection and talks to the others only through subjects, exactly as when
// it runs alone.
func Start(ctx context.Context, opts Options) (_ *Stack, err error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.DataDir == "" {
		return nil, errors.New("stack: a data dir is required")
	}
	for _, r := range opts.Table() {
		if err := r.Opts.Validate(); err != nil {
			return nil, fmt.Errorf("%s service: %w", r.Def.Name, err)
		}
	}
	// The data dir holds every secret of the stack: another local user who
	// made it (a shared place such as /tmp) or may swap it is refused.
	if err := secretfile.PrivateDir(opts.DataDir); err != nil {
		return nil, fmt.Errorf("stack: data dir: %w", err)
	}
	s := &Stack{log: opts.Logger, errs: make(chan error, 8), Services: map[string]service.Service{},
		prefix: bus.NewSubjects(opts.Prefix).Prefix, ids: map[access.Role]access.Identity{}, agents: map[string]agent{},
		unpurged: map[string]bool{}, extra: opts.ExtraUsers}
	var users []*server.NkeyUser
	if !opts.InsecureBus {
		if users, err = s.makeIdentities(filepath.Join(opts.DataDir, "nats")); err != nil {
			return nil, err
		}
	}
	ns, err := embednats.Start(embednats.Options{Host: opts.NATSHost, Port: opts.NATSPort,
		InProcessOnly: opts.InProcessOnly, StoreDir: filepath.Join(opts.DataDir, "jetstream"), MaxStore: opts.NATSMaxStore, Users: users})
	if err != nil {
		return nil, err
	}
	life, cancel := context.WithCancel(context.Background())
	s.NATS, s.cancel = ns, cancel
	if jsc := ns.Server.JetStreamConfig(); jsc != nil {
		budgetStreams(&opts, jsc.MaxStore, opts.Logger)
	}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	connect := func(name string, role access.Role) (*nats.Conn, error) {
		nc, err := s.ConnectAs(name, role)
		if err != nil {
			return nil, err
		}
		s.conns = append(s.conns, nc)
		return nc, nil
	}

	// The agents service answers before any other service does, so a client
	// that saw the stack answer can make an agent at once.
	if s.Conn, err = connect("mcpbus-up", access.Operator); err != nil {
		return nil, err
	}
	if s.Identities != nil {
		hostNC, err := connect("mcpbus-host", access.Host)
		if err != nil {
			return nil, err
		}
		s.hostNC = hostNC
		if err := s.serveAgents(hostNC); err != nil {
			return nil, err
		}
		hjs, err := jetstream.New(hostNC)
		if err != nil {
			return nil, fmt.Errorf("stack: host jetstream: %w", err)
		}
		sctx, cancelSync := context.WithTimeout(ctx, 60*time.Second)
		err = s.syncAgentRecords(sctx, hjs)
		cancelSync()
		if err != nil {
			return nil, err
		}
	}

	// Setup steps wait for JetStream as long as the start-up may take.
	wait, cancelWait := context.WithTimeout(ctx, 60*time.Second)
	defer cancelWait()
	setup, stopSetup := context.WithCancel(life)
	defer stopSetup()
	context.AfterFunc(wait, stopSetup)
	edge, stopEdge := context.WithCancel(life)
	s.stopEdge = stopEdge
	var order []string
	for _, r := range opts.Table() {
		role, err := access.RoleOf(r.Def.Name)
		if err != nil {
			return nil, err
		}
		nc, err := connect(service.ConnName(r.Def.Name), role)
		if err != nil {
			return nil, err
		}
		kp, err := s.keyPair(role)
		if err != nil {
			return nil, err
		}
		svc, err := r.Opts.Build(setup, service.Env{Conn: nc, Prefix: opts.Prefix, DataDir: opts.DataDir,
			Replicas: 1, Logger: opts.Logger.With("service", r.Def.Name), SharedHost: true, Identity: kp, Protected: s.protected()})
		if err != nil {
			return nil, fmt.Errorf("%s service: %w", r.Def.Name, err)
		}
		if svc == nil {
			continue // turned off by its settings
		}
		switch v := svc.(type) {
		case *runner.Runner:
			s.Runner = v
		case *gateway.Gateway:
			s.Gateway = v
			// A revoked agent's held calls are denied through the
			// gateway's store: its decisions are audited (approval_decided).
			s.agMu.Lock()
			s.held = v.HeldCalls()
			s.agMu.Unlock()
		}
		s.Services[r.Def.Name] = svc
		order = append(order, r.Def.Name)
		if _, ok := svc.(*gateway.Gateway); ok {
			s.run(&s.edge, r.Def.Name, func() error { return svc.Run(edge) })
			continue
		}
		s.run(&s.wg, r.Def.Name, func() error { return svc.Run(life) })
	}

	s.Client = client.New(s.Conn, client.Options{Prefix: opts.Prefix})
	for _, name := range order {
		select {
		case <-s.Services[name].Ready():
		case err := <-s.errs:
			return nil, err
		case <-wait.Done():
			return nil, fmt.Errorf("stack: the %s service did not come up: %w", name, wait.Err())
		}
	}
	return s, nil
}

// budgetStreams sizes the streams of the services (and the tasks bucket,
// bounded as they are) by store, the storage
// the embedded server runs with (--nats-max-store, or 75% of the free disk):
// made one at a time, the first would take what it asks (1 or 2 GiB) and
// leave the rest no room, so on a server with less than 9 GiB every
// default bound is scaled down together (bus.Budget), and the choice is
// logged once. A bound the caller set is left as it is (and counted).
// Separate deployments keep the defaults, each fitted to what is left
// (bus.FitMaxBytes).
func budgetStreams(o *Options, store int64, log *slog.Logger) {
	gw := *o.Gateway // the caller's, shared: not to be written
	o.Gateway = &gw
	bounds := []struct {
		name string
		def  int64
		set  []*int64
	}{
		{"events", bus.DefaultEventsMaxBytes, []*int64{&o.Config.EventsMaxBytes, &o.Runner.EventsMaxBytes, &o.Gateway.EventsMaxBytes}},
		{"audit", bus.DefaultAuditMaxBytes, []*int64{&o.Config.AuditMaxBytes, &o.Runner.AuditMaxBytes, &o.Gateway.AuditMaxBytes}},
		{"chat log", conversation.DefaultMaxBytes, []*int64{&o.Chat.LogMaxBytes}},
		{"chat results", results.DefaultMaxBytes, []*int64{&o.Chat.ResultsMaxBytes}},
		// A bucket, but bounded like a stream: it reserves its bound too.
		{"tasks bucket", runner.DefaultTaskMaxBytes, []*int64{&o.Runner.TaskMaxBytes}},
	}
	asks := make([]int64, len(bounds))
	for i, b := range bounds {
		asks[i] = b.def
		for _, p := range b.set {
			if *p != 0 {
				asks[i] = *p
			}
		}
	}
	sized, scaled := bus.Budget(store, asks...)
	if !scaled {
		return
	}
	var chosen []string
	var sum, defaults int64
	for i, b := range bounds {
		for _, p := range b.set {
			if *p == 0 {
				*p = sized[i]
			}
		}
		chosen = append(chosen, b.name+" "+bus.Size(*b.set[0]))
		sum += *b.set[0]
		defaults += b.def
	}
	log.Warn(fmt.Sprintf("NATS has %s of storage, too little for the streams' default bounds (%s) and room for the buckets: "+
		"the streams are bounded at %s (%s in all; a stream made larger before keeps its bound); for the full sizes, %s",
		bus.Size(store), bus.Size(defaults), strings.Join(chosen, ", "), bus.Size(sum), bus.StorageAdvice),
		"nats_max_store", store, "streams_bytes", sum)
}

// makeIdentities loads (making on first start) the identity of every role
// and of every agent kept in dir, and returns the server's users.
func (s *Stack) makeIdentities(dir string) ([]*server.NkeyUser, error) {
	store, err := access.OpenStore(dir)
	if err != nil {
		return nil, err
	}
	s.Identities = store
	for _, role := range access.ServiceRoles() {
		id, err := store.Ensure(string(role), role)
		if err != nil {
			return nil, err
		}
		s.ids[role] = id
	}
	if err := s.loadAgents(); err != nil {
		return nil, err
	}
	return s.users()
}

// protected are the paths of secrets the runner keeps its children from
// besides the data dir: the identities directory (inside the data dir
// today; named so that moving it keeps it protected).
func (s *Stack) protected() []string {
	if s.Identities == nil {
		return nil
	}
	return []string{s.Identities.Dir()}
}

// ConnectAs opens an in-process connection as role's identity (any
// connection with InsecureBus), through the same setup as a service's own.
func (s *Stack) ConnectAs(name string, role access.Role) (*nats.Conn, error) {
	var o natsconn.Options
	if id, ok := s.ids[role]; ok {
		o.Seed, o.InboxPrefix = id.Seed, id.Inbox()
	}
	nc, err := o.Dial(name, natsconn.FailFast, s.log, nats.InProcessServer(s.NATS.Server))
	if err != nil {
		return nil, fmt.Errorf("stack: %w", err)
	}
	return nc, nil
}

// run keeps one service going, counted in wg; its failure ends Wait.
func (s *Stack) run(wg *sync.WaitGroup, name string, fn func() error) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := fn(); err != nil && !errors.Is(err, context.Canceled) {
			select {
			case s.errs <- fmt.Errorf("%s service: %w", name, err):
			default:
			}
		}
	}()
}

// Wait blocks until ctx ends or a service fails.
func (s *Stack) Wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case err := <-s.errs:
		return err
	}
}

// Close stops every service (the runner stops its servers), then NATS. The
// gateway stops first: the calls in flight it lets finish need the runner
// and the other services still running.
func (s *Stack) Close() {
	s.once.Do(func() {
		if s.stopEdge != nil {
			s.stopEdge()
		}
		s.edge.Wait()
		s.cancel()
		s.wg.Wait()
		for _, nc := range s.conns {
			nc.Close()
		}
		s.NATS.Stop()
	})
}

// LoadServers imports a servers file (any supported format) through the config
// service; servers that exist are updated.
func (s *Stack) LoadServers(ctx context.Context, path string, vars map[string]string) (model.ConfigImportReply, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return model.ConfigImportReply{}, apierr.Wrap(apierr.Validation, "reading "+path+": "+err.Error(), err)
	}
	return s.Client.ImportConfigs(ctx, model.ConfigImportRequest{Content: string(data), Vars: vars, Replace: true})
}

// keyPair is the key pair of role's identity (nil on an insecure bus).
func (s *Stack) keyPair(role access.Role) (nkeys.KeyPair, error) {
	id, ok := s.ids[role]
	if !ok {
		return nil, nil
	}
	kp, err := nkeys.FromSeed(id.Seed)
	if err != nil {
		return nil, fmt.Errorf("stack: identity %s: %w", id.Name, err)
	}
	return kp, nil
}
