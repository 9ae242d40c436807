package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"github.com/mcpbus/mcpbus/libs/natsconn"
	"github.com/mcpbus/mcpbus/libs/ops"
	"github.com/mcpbus/mcpbus/libs/procmem"
	"github.com/mcpbus/mcpbus/libs/settings"
	"github.com/mcpbus/mcpbus/libs/telemetry"
)

// Defaults of the host settings.
const (
	DefaultDataDir  = ".mcpbus"
	DefaultLogLevel = "info"
)

// Bus is where the bus is: NATS and the subject prefix. The CLI shares
// these with its client commands.
type Bus struct {
	NATS   natsconn.Options
	Prefix string
}

// Register adds the bus settings.
func (b *Bus) Register(s *settings.Set) {
	b.NATS.Register(s)
	s.String(&b.Prefix, "prefix", "", "", "subject prefix (default mcp.v1)")
}

// Host are the settings of the process a service runs in.
type Host struct {
	LogLevel string
	DataDir  string
	Replicas int
	// MetricsAddr is where the operations endpoint listens ("" = none).
	MetricsAddr string
	// PprofAddr is where Go's profiling endpoints listen ("" = none).
	PprofAddr string
	// Memory is what the process does about its own memory.
	Memory procmem.Options
	// InsecureBus runs the service on a NATS server that requires no
	// authentication; without it such a server is refused (fail closed: a
	// server left open would let anyone who reaches it act as any service).
	InsecureBus bool
}

// RegisterLogLevel adds --log-level (mcpbus up has it too).
func RegisterLogLevel(s *settings.Set, p *string) {
	s.String(p, "log-level", "", DefaultLogLevel, "debug, info, warn or error; debug adds MCP servers' stderr lines")
}

// RegisterDataDir adds --data-dir (mcpbus up has it too).
func RegisterDataDir(s *settings.Set, p *string) {
	s.String(p, "data-dir", "", DefaultDataDir, "data directory (JetStream files under mcpbus up, the file secret store, admin.key, pid files)")
}

// Register adds the host settings of a service running alone.
func (h *Host) Register(s *settings.Set) {
	RegisterLogLevel(s, &h.LogLevel)
	RegisterDataDir(s, &h.DataDir)
	s.Int(&h.Replicas, "replicas", "", 1, "replicas of the JetStream stream and buckets a service creates: 3 on a 3-node cluster")
	RegisterMetricsAddr(s, &h.MetricsAddr)
	RegisterPprofAddr(s, &h.PprofAddr)
	h.Memory.Register(s)
	s.Bool(&h.InsecureBus, "insecure-bus", "", false, "run on a NATS server that requires no authentication (anyone who reaches it may act as any service); without it such a server is refused")
}

// Logger is the JSON logger at the chosen level; records logged with a
// traced context carry trace_id and span_id.
func Logger(level string, w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	return slog.New(telemetry.LogHandler(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl}))), nil
}

// Validate checks the host settings.
func (h Host) Validate() error {
	if h.Replicas < 1 || h.Replicas > 5 {
		return fmt.Errorf("--replicas %d: JetStream allows 1 to 5", h.Replicas)
	}
	if h.DataDir == "" {
		return errors.New("--data-dir must not be empty")
	}
	if err := h.Memory.Validate(); err != nil {
		return err
	}
	return validMetricsAddr(h.MetricsAddr)
}

// RunAlone runs one service in this process against the NATS of b until ctx
// ends: it connects (waiting for NATS as long as it takes), builds the
// service, runs it and says when it is ready.
func RunAlone(ctx context.Context, def Definition, b Bus, h Host, opts Options, stderr io.Writer) error {
	if err := h.Validate(); err != nil {
		return err
	}
	if err := opts.Validate(); err != nil {
		return err
	}
	log, err := Logger(h.LogLevel, stderr)
	if err != nil {
		return err
	}
	log = log.With("service", def.Name)
	if err := os.MkdirAll(h.DataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	shutdownTel, err := telemetry.Setup(ctx, ConnName(def.Name), def.Version)
	if err != nil {
		return err
	}
	defer func() {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = shutdownTel(c)
	}()
	opsSrv, stopOps, err := StartOps(h.MetricsAddr, ConnName(def.Name), def.Version, log)
	if err != nil {
		return err
	}
	defer stopOps()
	stopPprof, err := StartPprof(h.PprofAddr, log)
	if err != nil {
		return err
	}
	defer stopPprof()
	h.Memory.Start(ctx, log)
	if st, err := os.Stat(b.NATS.NKeyFile); err == nil && st.IsDir() {
		// A directory of instance identities (runner-1.nk …): take a free one.
		seed, release, err := natsconn.Claim(b.NATS.NKeyFile)
		if err != nil {
			return err
		}
		defer release()
		log.Info("claimed a bus identity", "seed", seed)
		b.NATS.NKeyFile = seed
	}
	nc, err := b.NATS.Dial(ConnName(def.Name), natsconn.Wait, log)
	if err != nil {
		return err
	}
	defer nc.Close()
	if !nc.IsConnected() {
		log.Info("waiting for NATS", "url", b.NATS.URLs)
		if err := natsconn.WaitConnected(ctx, nc); err != nil {
			return nil // stopped while waiting: a clean stop
		}
	}
	if err := checkAuthRequired(nc, h.InsecureBus, log); err != nil {
		return err
	}
	id, err := b.NATS.Identity()
	if err != nil {
		return err
	}
	svc, err := opts.Build(ctx, Env{Conn: nc, Prefix: b.Prefix, DataDir: h.DataDir, Replicas: h.Replicas, Logger: log, Identity: id,
		Protected: b.NATS.IdentityPaths()})
	if err != nil {
		return err
	}
	if svc == nil {
		return fmt.Errorf("the %s service is turned off by its settings: nothing to run", def.Name)
	}
	checks := []ops.Check{ops.Ready(def.Name, svc.Ready()), ops.NATS("nats", nc), ops.Running(ctx)}
	if c, ok := svc.(Checker); ok {
		checks = append(checks, c.Checks()...)
	}
	opsSrv.SetChecks(checks...)
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	select {
	case <-svc.Ready():
		log.Info("service ready", "nats", nc.ConnectedUrlRedacted())
		h.Memory.Ready(log)
		if a, ok := svc.(Announcer); ok {
			a.Announce(stderr)
		}
	case err := <-done:
		return err
	}
	return <-done
}

// Flags is the flag set of a service running alone: the bus, the host and
// the service's own settings, bound to the returned values.
func Flags(def Definition) (*pflag.FlagSet, *Bus, *Host, Options) {
	fs := pflag.NewFlagSet(ConnName(def.Name), pflag.ContinueOnError)
	var b Bus
	var h Host
	opts := def.Options()
	s := settings.New(fs)
	b.Register(s)
	h.Register(s)
	opts.Register(s)
	return fs, &b, &h, opts
}

// Main is the whole main of a service's own binary: flags and env, signals,
// RunAlone. It returns the exit code.
func Main(def Definition, args []string, stderr io.Writer) int {
	fs, b, h, opts := Flags(def)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected arguments %q\n", ConnName(def.Name), fs.Args())
		return 2
	}
	if err := settings.ApplyEnv(fs); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", ConnName(def.Name), err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := RunAlone(ctx, def, *b, *h, opts, stderr); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", ConnName(def.Name), err)
		return 1
	}
	return 0
}

// checkAuthRequired refuses a NATS server that asks no identity, unless
// the operator said so (--insecure-bus): every permission of the bus
// (libs/access) holds only when the server authenticates its clients.
func checkAuthRequired(nc *nats.Conn, insecure bool, log *slog.Logger) error {
	if nc.AuthRequired() {
		return nil
	}
	if insecure {
		log.Warn("the NATS server requires no authentication (--insecure-bus): anyone who reaches it may act as any service", "server", nc.ConnectedUrlRedacted())
		return nil
	}
	return fmt.Errorf("the NATS server at %s requires no authentication: anyone who reaches it could act as this service (read every call, resolve every secret); give it the users of deploy/nats/auth.conf (docs/operating.md), or pass --insecure-bus to run on it anyway", nc.ConnectedUrlRedacted())
}
