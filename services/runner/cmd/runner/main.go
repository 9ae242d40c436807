// Command mcpbus-runner runs the runner service alone, against an existing
// NATS server (the compose deployment runs N of these).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/mcpbus/mcpbus/libs/gctune"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/telemetry"
	"github.com/mcpbus/mcpbus/services/runner/runner"
)

func main() {
	gctune.Apply()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "mcpbus-runner:", err)
		os.Exit(1)
	}
}

func run() error {
	url := flag.String("nats", envOr("MCPBUS_NATS_URL", nats.DefaultURL), "NATS URL (env MCPBUS_NATS_URL)")
	prefix := flag.String("prefix", os.Getenv("MCPBUS_PREFIX"), "subject prefix (env MCPBUS_PREFIX)")
	id := flag.String("id", os.Getenv("MCPBUS_RUNNER_ID"), "runner id (default: random; env MCPBUS_RUNNER_ID)")
	level := flag.String("log-level", envOr("MCPBUS_LOG_LEVEL", "info"), "log level")
	callTimeout := flag.Duration("call-timeout", 30*time.Second, "default tool call timeout")
	replicas := flag.Int("replicas", envInt("MCPBUS_REPLICAS", 1), "replicas of the shared JetStream stream and buckets: 3 on a 3-node cluster (env MCPBUS_REPLICAS)")
	leaseTTL := flag.Duration("lease-ttl", envDuration("MCPBUS_LEASE_TTL", 5*time.Second), "ownership lease TTL: a runner that dies loses its servers to others after this long (env MCPBUS_LEASE_TTL)")
	idleTimeout := flag.Duration("idle-timeout", envDuration("MCPBUS_IDLE_TIMEOUT", 0), "stop a server after this long without calls (0: the runner default, 30m; negative: never; env MCPBUS_IDLE_TIMEOUT)")
	dataDir := flag.String("data-dir", os.Getenv("MCPBUS_DATA_DIR"), "keep pid files here so a restarted runner ends servers orphaned by a SIGKILL (env MCPBUS_DATA_DIR)")
	maxServers := flag.Int("max-servers", envInt("MCPBUS_MAX_SERVERS", 10), "servers running at once at most (env MCPBUS_MAX_SERVERS)")
	flag.Parse()

	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	shutdown, err := telemetry.Setup(ctx, "mcpbus-runner", runner.Version)
	if err != nil {
		return err
	}
	defer func() { _ = shutdown(context.Background()) }()
	// The first URL is this runner's node: connect to it (no shuffling) and
	// fail over to the others, reconnecting forever.
	nc, err := nats.Connect(*url, nats.Name("mcpbus-runner"), nats.DontRandomize(),
		nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", *url, err)
	}
	defer nc.Close()
	r, err := runner.New(nc, runner.Options{Prefix: *prefix, ID: *id, Logger: log, CallTimeout: *callTimeout, Replicas: *replicas,
		DataDir: *dataDir, MaxServers: *maxServers,
		LeaseTTL: *leaseTTL, IdleTimeout: *idleTimeout,
	})
	if err != nil {
		return err
	}
	return r.Run(ctx)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return n
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return d
	}
	return def
}
