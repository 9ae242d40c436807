// Command mcpbus-registry runs the registry service alone, against an
// existing NATS server with JetStream.
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
	"github.com/mcpbus/mcpbus/services/registry/registry"
)

func main() {
	gctune.Apply()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "mcpbus-registry:", err)
		os.Exit(1)
	}
}

func run() error {
	url := flag.String("nats", envOr("MCPBUS_NATS_URL", nats.DefaultURL), "NATS URL (env MCPBUS_NATS_URL)")
	prefix := flag.String("prefix", os.Getenv("MCPBUS_PREFIX"), "subject prefix (env MCPBUS_PREFIX)")
	level := flag.String("log-level", envOr("MCPBUS_LOG_LEVEL", "info"), "log level")
	official := flag.String("official-registry-url", envOr("MCPBUS_OFFICIAL_REGISTRY_URL", registry.DefaultOfficialURL),
		"base URL of the Official MCP Registry or a private sub-registry (env MCPBUS_OFFICIAL_REGISTRY_URL)")
	smithery := flag.String("smithery-registry-url", envOr("MCPBUS_SMITHERY_REGISTRY_URL", registry.DefaultSmitheryURL),
		"base URL of Smithery's registry API (env MCPBUS_SMITHERY_REGISTRY_URL)")
	sourceTimeout := flag.Duration("source-timeout", envDuration("MCPBUS_REGISTRY_SOURCE_TIMEOUT", 5*time.Second),
		"how long one registry may take to answer (env MCPBUS_REGISTRY_SOURCE_TIMEOUT)")
	cacheTTL := flag.Duration("cache-ttl", envDuration("MCPBUS_REGISTRY_CACHE_TTL", 10*time.Minute),
		"how long a registry answer is reused (env MCPBUS_REGISTRY_CACHE_TTL)")
	staleTTL := flag.Duration("stale-ttl", envDuration("MCPBUS_REGISTRY_STALE_TTL", 24*time.Hour),
		"how long an expired answer may stand in while a registry is down (env MCPBUS_REGISTRY_STALE_TTL)")
	replicas := flag.Int("replicas", envInt("MCPBUS_REPLICAS", 1), "replicas of the cache bucket: 3 on a 3-node cluster (env MCPBUS_REPLICAS)")
	flag.Parse()

	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	shutdown, err := telemetry.Setup(ctx, "mcpbus-registry", registry.Version)
	if err != nil {
		return err
	}
	defer func() { _ = shutdown(context.Background()) }()
	nc, err := nats.Connect(*url, nats.Name("mcpbus-registry"), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", *url, err)
	}
	defer nc.Close()
	svc, err := registry.New(nc, registry.Options{
		Prefix: *prefix, OfficialURL: *official, SmitheryURL: *smithery,
		// The key comes from the environment only: a flag would show in ps.
		SmitheryAPIKey: os.Getenv("SMITHERY_API_KEY"),
		SourceTimeout:  *sourceTimeout, CacheTTL: *cacheTTL, StaleTTL: *staleTTL,
		Replicas: *replicas, Logger: log,
	})
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

func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return d
	}
	return def
}
