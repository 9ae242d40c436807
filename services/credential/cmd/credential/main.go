// Command mcpbus-credential runs the credential service alone, against an
// existing NATS server, with the file store or Vault (settings from the
// environment like the vault CLI: VAULT_ADDR, VAULT_TOKEN, MCPBUS_VAULT_MOUNT,
// MCPBUS_VAULT_ROLE_ID, MCPBUS_VAULT_SECRET_ID).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/mcpbus/mcpbus/libs/gctune"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/telemetry"
	"github.com/mcpbus/mcpbus/services/credential/credential"
	"github.com/mcpbus/mcpbus/services/credential/store"
	"github.com/mcpbus/mcpbus/services/credential/store/filestore"
	"github.com/mcpbus/mcpbus/services/credential/store/vaultstore"
)

func main() {
	gctune.Apply()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "mcpbus-credential:", err)
		os.Exit(1)
	}
}

func run() error {
	url := flag.String("nats", envOr("MCPBUS_NATS_URL", nats.DefaultURL), "NATS URL (env MCPBUS_NATS_URL)")
	prefix := flag.String("prefix", os.Getenv("MCPBUS_PREFIX"), "subject prefix (env MCPBUS_PREFIX)")
	backend := flag.String("backend", envOr("MCPBUS_CRED_BACKEND", "file"), "secret store: file or vault (env MCPBUS_CRED_BACKEND)")
	dataDir := flag.String("data-dir", envOr("MCPBUS_DATA_DIR", ".mcpbus"), "data directory; the file store lives in <data-dir>/credentials (env MCPBUS_DATA_DIR)")
	level := flag.String("log-level", envOr("MCPBUS_LOG_LEVEL", "info"), "log level (env MCPBUS_LOG_LEVEL)")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}

	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	shutdown, err := telemetry.Setup(ctx, credential.ServiceName, credential.Version)
	if err != nil {
		return err
	}
	defer func() { _ = shutdown(context.Background()) }()

	var st store.Store
	switch *backend {
	case "file":
		fs, err := filestore.New(filepath.Join(*dataDir, filestore.SubDir))
		if err != nil {
			return err
		}
		st = fs
		log.Info("file credential store", "dir", fs.Dir())
	case "vault":
		vs, err := vaultstore.New(ctx, vaultstore.ConfigFromEnv(), log)
		if err != nil {
			return err
		}
		defer vs.Close()
		st = vs
	default:
		return fmt.Errorf("--backend must be file or vault, not %q", *backend)
	}

	nc, err := nats.Connect(*url, nats.Name(credential.ServiceName), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond))
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", *url, err)
	}
	defer nc.Close()
	svc, err := credential.New(nc, credential.Options{Prefix: *prefix, Store: st, Logger: log})
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
