// Package stack assembles every mcpbus service in one process around an
// embedded NATS server: what `mcpbus up` runs, and what end-to-end tests start.
// Each service gets its own in-process connection and talks to the others
// only through subjects, exactly as when deployed separately.
package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/config/config"
	"github.com/mcpbus/mcpbus/services/credential/credential"
	"github.com/mcpbus/mcpbus/services/credential/store"
	"github.com/mcpbus/mcpbus/services/credential/store/filestore"
	"github.com/mcpbus/mcpbus/services/credential/store/vaultstore"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/services/registry/registry"
	"github.com/mcpbus/mcpbus/services/runner/runner"
)

// Credential backends.
const (
	BackendFile  = "file"
	BackendVault = "vault"
)

// Options configure the whole system. Service options are passed through;
// Prefix and Logger are filled in for every service.
type Options struct {
	// DataDir holds JetStream's files, the file credential store
	// (DataDir/secrets) and the runner's pid files.
	DataDir string
	// NATSHost and NATSPort are where the embedded NATS listens (port -1: a
	// free port; InProcessOnly: no listener at all).
	NATSHost      string
	NATSPort      int
	InProcessOnly bool
	Prefix        string
	Logger        *slog.Logger

	// CredBackend is file (default) or vault; Vault configures the latter.
	CredBackend string
	Vault       vaultstore.Config

	Runner   runner.Options
	Config   config.Options
	Registry registry.Options
	// Gateway, when set, serves the HTTP edge (aggregated /mcp, REST API).
	Gateway *gateway.Options
}

// Stack is a running system.
type Stack struct {
	NATS *embednats.Server
	// Conn is a connection for the caller's own use (loading files, tests).
	Conn   *nats.Conn
	Client *client.Client
	Runner *runner.Runner
	// Gateway is the HTTP edge (nil unless Options.Gateway was set).
	Gateway *gateway.Gateway

	log    *slog.Logger
	conns  []*nats.Conn
	cancel context.CancelFunc
	wg     sync.WaitGroup
	errs   chan error
	closer []func()
	once   sync.Once
}

// Start brings every service up and returns once they all answer.
func Start(ctx context.Context, opts Options) (_ *Stack, err error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.DataDir == "" {
		return nil, errors.New("stack: a data dir is required")
	}
	if err := os.MkdirAll(opts.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("stack: data dir: %w", err)
	}
	ns, err := embednats.Start(embednats.Options{Host: opts.NATSHost, Port: opts.NATSPort,
		InProcessOnly: opts.InProcessOnly, StoreDir: filepath.Join(opts.DataDir, "jetstream")})
	if err != nil {
		return nil, err
	}
	life, cancel := context.WithCancel(context.Background())
	s := &Stack{NATS: ns, log: opts.Logger, cancel: cancel, errs: make(chan error, 8)}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	connect := func(name string) (*nats.Conn, error) {
		nc, err := ns.Connect(nats.Name(name))
		if err != nil {
			return nil, fmt.Errorf("stack: connecting %s: %w", name, err)
		}
		s.conns = append(s.conns, nc)
		return nc, nil
	}

	// Credential service first: the config service and the runners use it.
	st, err := openStore(ctx, opts)
	if err != nil {
		return nil, err
	}
	credNC, err := connect("mcpbus-credential")
	if err != nil {
		return nil, err
	}
	cred, err := credential.New(credNC, credential.Options{Prefix: opts.Prefix, Store: st, Logger: opts.Logger})
	if err != nil {
		return nil, err
	}
	if err := cred.Start(); err != nil {
		return nil, err
	}
	s.closer = append(s.closer, func() { _ = cred.Stop() })

	cfgNC, err := connect("mcpbus-config")
	if err != nil {
		return nil, err
	}
	co := opts.Config
	co.Prefix, co.Logger = opts.Prefix, opts.Logger
	cfgSvc, err := config.New(cfgNC, co)
	if err != nil {
		return nil, err
	}
	s.run("config", func() error { return cfgSvc.Run(life) })

	regNC, err := connect("mcpbus-registry")
	if err != nil {
		return nil, err
	}
	ro := opts.Registry
	ro.Prefix, ro.Logger = opts.Prefix, opts.Logger
	if ro.Credentials == nil {
		// The Smithery key may live in the credential service.
		if ro.Credentials, err = credclient.NewResolver(regNC, opts.Prefix); err != nil {
			return nil, err
		}
	}
	reg, err := registry.New(regNC, ro)
	if err != nil {
		return nil, err
	}
	s.run("registry", func() error { return reg.Run(life) })

	runNC, err := connect("mcpbus-runner")
	if err != nil {
		return nil, err
	}
	resolver, err := credclient.NewResolver(runNC, opts.Prefix)
	if err != nil {
		return nil, err
	}
	rn := opts.Runner
	rn.Prefix, rn.Logger, rn.Resolver = opts.Prefix, opts.Logger, resolver
	if rn.DataDir == "" {
		rn.DataDir = opts.DataDir
	}
	if s.Runner, err = runner.New(runNC, rn); err != nil {
		return nil, err
	}
	s.run("runner", func() error { return s.Runner.Run(life) })

	if opts.Gateway != nil {
		gwNC, err := connect("mcpbus-gateway")
		if err != nil {
			return nil, err
		}
		gw := *opts.Gateway
		gw.Prefix, gw.Logger = opts.Prefix, opts.Logger
		if gw.DataDir == "" {
			gw.DataDir = opts.DataDir
		}
		if s.Gateway, err = gateway.New(ctx, gwNC, gw); err != nil {
			return nil, err
		}
		s.closer = append(s.closer, s.Gateway.Close)
		s.run("gateway", func() error { return s.Gateway.Run(life) })
	}

	if s.Conn, err = connect("mcpbus-up"); err != nil {
		return nil, err
	}
	s.Client = client.New(s.Conn, client.Options{Prefix: opts.Prefix})

	wait, cancelWait := context.WithTimeout(ctx, 60*time.Second)
	defer cancelWait()
	for name, ready := range map[string]<-chan struct{}{"config": cfgSvc.Ready(), "registry": reg.Ready(), "runner": s.Runner.Ready()} {
		select {
		case <-ready:
		case err := <-s.errs:
			return nil, err
		case <-wait.Done():
			return nil, fmt.Errorf("stack: the %s service did not come up: %w", name, wait.Err())
		}
	}
	return s, nil
}

// openStore opens the chosen credential backend.
func openStore(ctx context.Context, opts Options) (store.Store, error) {
	switch opts.CredBackend {
	case "", BackendFile:
		return filestore.New(filepath.Join(opts.DataDir, "secrets"))
	case BackendVault:
		if opts.Vault.Address == "" {
			return nil, errors.New("stack: the vault backend needs VAULT_ADDR")
		}
		return vaultstore.New(ctx, opts.Vault, opts.Logger)
	}
	return nil, fmt.Errorf("stack: unknown credential backend %q (file or vault)", opts.CredBackend)
}

// run keeps one service going; its failure ends Wait.
func (s *Stack) run(name string, fn func() error) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
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

// Close stops every service (the runner stops its servers), then NATS.
func (s *Stack) Close() {
	s.once.Do(func() {
		s.cancel()
		s.wg.Wait()
		for i := len(s.closer) - 1; i >= 0; i-- {
			s.closer[i]()
		}
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
