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

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/telemetry"
	"github.com/mcpbus/mcpbus/services/runner/runner"
)

func main() {
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
	nc, err := nats.Connect(*url, nats.Name("mcpbus-runner"), nats.MaxReconnects(-1))
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", *url, err)
	}
	defer nc.Close()
	r, err := runner.New(nc, runner.Options{Prefix: *prefix, ID: *id, Logger: log, CallTimeout: *callTimeout, Replicas: *replicas})
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
