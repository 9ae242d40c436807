package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpbus/mcpbus/libs/serverfile"
	"github.com/mcpbus/mcpbus/libs/telemetry"
	"github.com/mcpbus/mcpbus/services/config/config"
	"github.com/mcpbus/mcpbus/services/credential/store/vaultstore"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/services/registry/registry"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/tools/mcpbus/stack"
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
	credBackend string
	officialURL string
	smitheryURL string
	httpAddr    string
	noAuth      bool
	corsOrigins []string
	rateRPS     float64
	rateBurst   int
}

func newUpCmd(g *globals) *cobra.Command {
	o := &upOptions{}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run every mcpbus service in one process, with an embedded NATS server",
		Long: `up starts an embedded NATS server with JetStream (files under --data-dir) and every
mcpbus service: config, credential (secrets encrypted under --data-dir/secrets, or in
Vault with --cred-backend vault and VAULT_ADDR + VAULT_TOKEN or an AppRole), registry
search and the runner. It runs until interrupted.
With --config it first imports a servers file (mcpbus's own {"servers": [...]}, a Claude
Desktop / Cursor mcpServers JSON, or an mcp.yaml) through the config service; servers
already there with the same slug are updated, ${VAR} references come from the environment.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runUp(cmd.Context(), g, o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.natsHost, "nats-host", envOr("MCPBUS_NATS_HOST", "127.0.0.1"), "address the embedded NATS listens on (env MCPBUS_NATS_HOST)")
	f.IntVar(&o.natsPort, "nats-port", envInt("MCPBUS_NATS_PORT", 4222), "port of the embedded NATS (env MCPBUS_NATS_PORT)")
	f.StringVar(&o.dataDir, "data-dir", envOr("MCPBUS_DATA_DIR", ".mcpbus"), "data directory (env MCPBUS_DATA_DIR)")
	f.StringVar(&o.configFile, "config", envOr("MCPBUS_CONFIG", ""), "servers file to import at start (env MCPBUS_CONFIG)")
	f.StringVar(&o.logLevel, "log-level", envOr("MCPBUS_LOG_LEVEL", "info"), "debug, info, warn or error (env MCPBUS_LOG_LEVEL)")
	f.DurationVar(&o.callTimeout, "call-timeout", 30*time.Second, "default tool call timeout")
	f.DurationVar(&o.idleTimeout, "idle-timeout", 30*time.Minute, "stop a server after this long without calls (negative: never)")
	f.IntVar(&o.maxServers, "max-servers", 10, "servers running at once at most")
	f.StringVar(&o.credBackend, "cred-backend", envOr("MCPBUS_CRED_BACKEND", stack.BackendFile), "where secrets live: file (encrypted under the data dir) or vault (env MCPBUS_CRED_BACKEND; vault reads VAULT_ADDR, VAULT_TOKEN or MCPBUS_VAULT_ROLE_ID/MCPBUS_VAULT_SECRET_ID, MCPBUS_VAULT_MOUNT)")
	f.StringVar(&o.officialURL, "official-registry-url", envOr("MCPBUS_OFFICIAL_REGISTRY_URL", ""), "base URL of the Official MCP Registry or a private sub-registry (env MCPBUS_OFFICIAL_REGISTRY_URL)")
	f.StringVar(&o.smitheryURL, "smithery-registry-url", envOr("MCPBUS_SMITHERY_REGISTRY_URL", ""), "base URL of the Smithery registry (env MCPBUS_SMITHERY_REGISTRY_URL; key from SMITHERY_API_KEY)")
	f.StringVar(&o.httpAddr, "http-addr", envOr("MCPBUS_HTTP_ADDR", "127.0.0.1:8080"), "where the gateway (aggregated /mcp endpoint and REST API) listens; empty: no gateway (env MCPBUS_HTTP_ADDR)")
	f.BoolVar(&o.noAuth, "no-auth", envOr("MCPBUS_NO_AUTH", "") == "true", "turn the gateway's API keys off (local experiments only; env MCPBUS_NO_AUTH=true)")
	f.StringSliceVar(&o.corsOrigins, "cors-origin", nil, "browser origins allowed to call the gateway (repeat; * for any)")
	f.Float64Var(&o.rateRPS, "rate-rps", 20, "default requests per second per API key")
	f.IntVar(&o.rateBurst, "rate-burst", 40, "default burst per API key")
	return cmd
}

func runUp(ctx context.Context, g *globals, o *upOptions) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := slog.New(slog.NewJSONHandler(g.stderr, &slog.HandlerOptions{Level: level}))
	shutdownTel, err := telemetry.Setup(ctx, "mcpbus", runner.Version)
	if err != nil {
		return err
	}
	defer func() {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = shutdownTel(c)
	}()
	var gw *gateway.Options
	if o.httpAddr != "" {
		gw = &gateway.Options{Addr: o.httpAddr, NoAuth: o.noAuth, CORSOrigins: o.corsOrigins, RateRPS: o.rateRPS, RateBurst: o.rateBurst}
	}
	st, err := stack.Start(ctx, stack.Options{
		DataDir: o.dataDir, NATSHost: o.natsHost, NATSPort: o.natsPort, Prefix: g.prefix, Logger: log,
		CredBackend: o.credBackend, Vault: vaultstore.ConfigFromEnv(),
		Runner: runner.Options{CallTimeout: o.callTimeout, IdleTimeout: o.idleTimeout, MaxServers: o.maxServers},
		// The runner shares this host, so keyfile paths can be checked when saved.
		Config:   config.Options{CheckKeyfiles: true},
		Registry: registry.Options{OfficialURL: o.officialURL, SmitheryURL: o.smitheryURL, SmitheryAPIKey: os.Getenv("SMITHERY_API_KEY")},
		Gateway:  gw,
	})
	if err != nil {
		return stoppedDuringStart(ctx, log, err)
	}
	defer st.Close()
	if o.configFile != "" {
		if err := loadServers(ctx, st, o.configFile, log); err != nil {
			return stoppedDuringStart(ctx, log, err)
		}
	}
	log.Info("mcpbus up", "nats", st.NATS.ClientURL(), "data_dir", o.dataDir, "cred_backend", o.credBackend, "tracing", telemetry.Enabled())
	fmt.Fprintf(g.stderr, "mcpbus is up: NATS at %s, data in %s, secrets in %s. Try: mcpbus servers list; mcpbus tools\n", st.NATS.ClientURL(), o.dataDir, o.credBackend)
	if st.Gateway != nil {
		fmt.Fprintf(g.stderr, "gateway: MCP endpoint http://%s/mcp, REST API http://%s/api/v1 (OpenAPI at /api/v1/openapi.json)\n", st.Gateway.Addr(), st.Gateway.Addr())
		switch {
		case o.noAuth:
			fmt.Fprintln(g.stderr, "WARNING: authentication is OFF (--no-auth): anyone who can reach the gateway may call every tool and change every server")
		case st.Gateway.AdminKeyCreated():
			fmt.Fprintf(g.stderr, "gateway: an admin API key was written to %s (0600); send it as 'Authorization: Bearer <key>'; make more with mcpbus keys create\n", st.Gateway.AdminKeyPath())
		default:
			fmt.Fprintf(g.stderr, "gateway: the admin API key is in %s\n", st.Gateway.AdminKeyPath())
		}
	}
	return st.Wait(ctx)
}

// stoppedDuringStart is err, unless a signal asked to stop while the stack
// was starting: that is a clean stop (exit 0), not a failure.
func stoppedDuringStart(ctx context.Context, log *slog.Logger, err error) error {
	if ctx.Err() != nil {
		log.Info("mcpbus stopped during start-up", "cause", err.Error())
		return nil
	}
	return err
}

// loadServers imports a servers file through the config service, with ${VAR}
// references taken from this process's environment.
func loadServers(ctx context.Context, st *stack.Stack, path string, log *slog.Logger) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	vars := map[string]string{}
	for _, name := range serverfile.References(data) {
		if v, ok := os.LookupEnv(name); ok {
			vars[name] = v
		}
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	res, err := st.LoadServers(ctx, path, vars)
	if err != nil {
		return fmt.Errorf("loading %s: %w", path, err)
	}
	for _, s := range append(res.Created, res.Updated...) {
		log.Info("server config loaded", "server", s.Slug, "id", s.ID, "enabled", s.Enabled)
	}
	return nil
}
