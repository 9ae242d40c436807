// Command mcpbus-gateway runs the HTTP edge alone, against an existing NATS
// server: the aggregated MCP endpoint, the REST API, API keys and limits.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mcpbus/mcpbus/libs/gctune"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/telemetry"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/services/gateway/mcpserver"
)

func main() {
	gctune.Apply()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "mcpbus-gateway:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("mcpbus-gateway", flag.ContinueOnError)
	url := fs.String("nats", envOr("MCPBUS_NATS_URL", nats.DefaultURL), "NATS URL (env MCPBUS_NATS_URL)")
	prefix := fs.String("prefix", os.Getenv("MCPBUS_PREFIX"), "subject prefix (env MCPBUS_PREFIX)")
	addr := fs.String("http-addr", envOr("MCPBUS_HTTP_ADDR", gateway.DefaultAddr), "HTTP listen address (env MCPBUS_HTTP_ADDR)")
	dataDir := fs.String("data-dir", envOr("MCPBUS_DATA_DIR", ".mcpbus"), "directory of admin.key (env MCPBUS_DATA_DIR)")
	noAuth := fs.Bool("no-auth", envBool("MCPBUS_NO_AUTH", false), "turn API key auth OFF: local experiments only (env MCPBUS_NO_AUTH)")
	rps := fs.Float64("rate-rps", envFloat("MCPBUS_RATE_RPS", auth.DefaultRPS), "default requests per second per key (env MCPBUS_RATE_RPS)")
	burst := fs.Int("rate-burst", envInt("MCPBUS_RATE_BURST", auth.DefaultBurst), "default burst per key (env MCPBUS_RATE_BURST)")
	maxBody := fs.Int64("max-body", int64(envInt("MCPBUS_MAX_BODY", gateway.DefaultMaxBodyBytes)), "request body limit in bytes (env MCPBUS_MAX_BODY)")
	origins := fs.String("cors-origins", os.Getenv("MCPBUS_CORS_ORIGINS"), "comma-separated browser origins allowed by CORS, default none (env MCPBUS_CORS_ORIGINS)")
	callTimeout := fs.Duration("call-timeout", envDuration("MCPBUS_CALL_TIMEOUT", 60*time.Second), "tool call timeout (env MCPBUS_CALL_TIMEOUT)")
	stateless := fs.Bool("stateless", envBool("MCPBUS_STATELESS", false), "serve /mcp without sessions (env MCPBUS_STATELESS)")
	replicas := fs.Int("replicas", envInt("MCPBUS_REPLICAS", 1), "replicas of the key bucket and shared assets: 3 on a 3-node cluster (env MCPBUS_REPLICAS)")
	level := fs.String("log-level", envOr("MCPBUS_LOG_LEVEL", "info"), "log level (env MCPBUS_LOG_LEVEL)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}

	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	shutdown, err := telemetry.Setup(ctx, "mcpbus-gateway", auth.Version)
	if err != nil {
		return err
	}
	defer func() { _ = shutdown(context.Background()) }()
	nc, err := nats.Connect(*url, nats.Name("mcpbus-gateway"), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond))
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", *url, err)
	}
	defer nc.Close()

	g, err := gateway.New(ctx, nc, gateway.Options{
		Addr: *addr, Prefix: *prefix, Logger: log, DataDir: *dataDir, NoAuth: *noAuth,
		RateRPS: *rps, RateBurst: *burst, MaxBodyBytes: *maxBody, CORSOrigins: splitList(*origins),
		MCP:      mcpserver.Options{CallTimeout: *callTimeout, Stateless: *stateless},
		Replicas: *replicas,
	})
	if err != nil {
		return err
	}
	if *noAuth {
		fmt.Fprintf(os.Stderr, "WARNING: authentication is OFF (--no-auth): anyone reaching http://%s may call every tool and change every server\n", g.Addr())
	} else if g.AdminKeyCreated() {
		fmt.Fprintf(os.Stderr, "mcpbus-gateway: a new admin API key was written to %s (readable by you only)\n", g.AdminKeyPath())
	}
	return g.Run(ctx)
}

func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
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

func envFloat(name string, def float64) float64 {
	if n, err := strconv.ParseFloat(os.Getenv(name), 64); err == nil {
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
