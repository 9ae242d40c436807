// Command mcpbus-config runs the config service alone, against an existing
// NATS server (the compose deployment runs one or more of these).
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
	"github.com/mcpbus/mcpbus/services/config/config"
)

func main() {
	gctune.Apply()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "mcpbus-config:", err)
		os.Exit(1)
	}
}

func run() error {
	url := flag.String("nats", envOr("MCPBUS_NATS_URL", nats.DefaultURL), "NATS URL (env MCPBUS_NATS_URL)")
	prefix := flag.String("prefix", os.Getenv("MCPBUS_PREFIX"), "subject prefix (env MCPBUS_PREFIX)")
	level := flag.String("log-level", envOr("MCPBUS_LOG_LEVEL", "info"), "log level (env MCPBUS_LOG_LEVEL)")
	startTimeout := flag.Duration("start-timeout", envDuration("MCPBUS_START_TIMEOUT", 90*time.Second),
		"how long enable waits for a runner to start the server (env MCPBUS_START_TIMEOUT)")
	checkKeyfiles := flag.Bool("check-keyfiles", envBool("MCPBUS_CHECK_KEYFILES", false),
		"check keyfile paths on this host: only right when the runners share it (env MCPBUS_CHECK_KEYFILES)")
	replicas := flag.Int("replicas", envInt("MCPBUS_REPLICAS", 1),
		"replicas of the shared JetStream stream and buckets: 3 on a 3-node cluster (env MCPBUS_REPLICAS)")
	flag.Parse()

	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	shutdown, err := telemetry.Setup(ctx, "mcpbus-config", config.Version)
	if err != nil {
		return err
	}
	defer func() { _ = shutdown(context.Background()) }()
	nc, err := nats.Connect(*url, nats.Name("mcpbus-config"), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond))
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", *url, err)
	}
	defer nc.Close()
	svc, err := config.New(nc, config.Options{Prefix: *prefix, Logger: log, StartTimeout: *startTimeout,
		CheckKeyfiles: *checkKeyfiles, Replicas: *replicas})
	if err != nil {
		return err
	}
	return svc.Run(ctx)
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

func envBool(name string, def bool) bool {
	if b, err := strconv.ParseBool(os.Getenv(name)); err == nil {
		return b
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return d
	}
	return def
}
