package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/configstore"
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/telemetry"
	"github.com/mcpbus/mcpbus/services/runner/runner"
)

type upOptions struct {
	natsHost    string
	natsPort    int
	dataDir     string
	configFile  string
	logLevel    string
	callTimeout time.Duration
	idleTimeout time.Duration
	maxServers  int
}

func newUpCmd(g *globals) *cobra.Command {
	o := &upOptions{}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run every mcpbus service in one process, with an embedded NATS server",
		Long: `up starts an embedded NATS server with JetStream (files under --data-dir) and
every mcpbus service built so far (today: the runner), and runs until interrupted.
With --config it first loads a JSON or YAML file {"servers": [McpConfig, …]} into
the config bucket; servers already there with the same slug are updated.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runUp(cmd.Context(), g, o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.natsHost, "nats-host", envOr("MCPBUS_NATS_HOST", "127.0.0.1"), "address the embedded NATS listens on (env MCPBUS_NATS_HOST)")
	f.IntVar(&o.natsPort, "nats-port", envInt("MCPBUS_NATS_PORT", 4222), "port of the embedded NATS (env MCPBUS_NATS_PORT)")
	f.StringVar(&o.dataDir, "data-dir", envOr("MCPBUS_DATA_DIR", ".mcpbus"), "data directory (env MCPBUS_DATA_DIR)")
	f.StringVar(&o.configFile, "config", envOr("MCPBUS_CONFIG", ""), "servers file to load at start (env MCPBUS_CONFIG)")
	f.StringVar(&o.logLevel, "log-level", envOr("MCPBUS_LOG_LEVEL", "info"), "debug, info, warn or error (env MCPBUS_LOG_LEVEL)")
	f.DurationVar(&o.callTimeout, "call-timeout", 30*time.Second, "default tool call timeout")
	f.DurationVar(&o.idleTimeout, "idle-timeout", 30*time.Minute, "stop a server after this long without calls (negative: never)")
	f.IntVar(&o.maxServers, "max-servers", 10, "servers running at once at most")
	return cmd
}

func runUp(ctx context.Context, g *globals, o *upOptions) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := slog.New(slog.NewJSONHandler(g.stderr, &slog.HandlerOptions{Level: level}))
	if err := os.MkdirAll(o.dataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	shutdownTel, err := telemetry.Setup(ctx, "mcpbus", runner.Version)
	if err != nil {
		return err
	}
	defer func() {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = shutdownTel(c)
	}()

	ns, err := embednats.Start(embednats.Options{
		Host: o.natsHost, Port: o.natsPort, StoreDir: filepath.Join(o.dataDir, "jetstream"),
	})
	if err != nil {
		return err
	}
	defer ns.Stop()
	nc, err := ns.Connect(nats.Name("mcpbus-up"))
	if err != nil {
		return fmt.Errorf("connecting to embedded nats: %w", err)
	}
	defer nc.Close()

	if o.configFile != "" {
		if err := loadServers(ctx, nc, g.prefix, o.configFile, log); err != nil {
			return err
		}
	}
	r, err := runner.New(nc, runner.Options{Prefix: g.prefix, Logger: log, CallTimeout: o.callTimeout,
		IdleTimeout: o.idleTimeout, MaxServers: o.maxServers, DataDir: o.dataDir})
	if err != nil {
		return err
	}
	log.Info("mcpbus up", "nats", ns.ClientURL(), "data_dir", o.dataDir, "tracing", telemetry.Enabled())
	fmt.Fprintf(g.stderr, "mcpbus is up: NATS at %s, data in %s. Try: mcpbus tools\n", ns.ClientURL(), o.dataDir)
	return r.Run(ctx)
}

// loadServers writes the servers of a file into the config bucket.
func loadServers(ctx context.Context, nc *nats.Conn, prefix, path string, log *slog.Logger) error {
	servers, err := configstore.LoadFile(path)
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	assets, err := bus.EnsureAssets(ctx, js, bus.NewSubjects(prefix), bus.AssetOptions{})
	if err != nil {
		return err
	}
	store := configstore.Store{KV: assets.Configs}
	for _, s := range servers {
		saved, err := store.Upsert(ctx, s)
		if err != nil {
			return fmt.Errorf("loading %s: %w", s.Slug, err)
		}
		log.Info("server config loaded", "server", saved.Slug, "id", saved.ID, "enabled", saved.Enabled)
	}
	return nil
}
