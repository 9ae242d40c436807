// Command vaultdev runs a real HashiCorp Vault core in process for tests and local development:
// in-memory storage, initialized and unsealed, KV v2 mounted at secret/ (like `vault server -dev`),
// served over plain HTTP on loopback. It prints VAULT_ADDR and VAULT_TOKEN to stdout, then blocks
// until SIGINT or SIGTERM.
//
// It lives outside the go.work workspace (build with GOWORK=off) because the vault module drags in
// hundreds of dependencies the services do not need.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/vault/helper/namespace"
	"github.com/hashicorp/vault/helper/testhelpers/corehelpers"
	vaulthttp "github.com/hashicorp/vault/http"
	"github.com/hashicorp/vault/internalshared/configutil"
	"github.com/hashicorp/vault/sdk/logical"
	"github.com/hashicorp/vault/vault"
)

// Time limits of start-up and shutdown, so that neither can hang forever.
const (
	kvReadyTimeout  = 30 * time.Second
	shutdownTimeout = 10 * time.Second
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "vaultdev:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("vaultdev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8200", "loopback `host:port` to listen on (port 0 picks a free one)")
	logLevel := fs.String("log-level", "warn", "Vault log `level` on stderr: trace, debug, info, warn, error, off")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := checkLoopback(*addr); err != nil {
		return err
	}
	level := hclog.LevelFromString(*logLevel)
	if level == hclog.NoLevel {
		return fmt.Errorf("-log-level %q: want trace, debug, info, warn, error or off", *logLevel)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	tb := newTB("vaultdev", stderr)
	// Cleanups registered by vault's test helpers (core shutdown) run however we leave.
	defer tb.runCleanups()

	logger := hclog.New(&hclog.LoggerOptions{Name: "vault", Level: level, Output: stderr})
	core, token, err := startCore(ctx, tb, logger)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *addr, err)
	}
	srv := &http.Server{
		Handler: vaulthttp.Handler.Handler(&vault.HandlerProperties{
			Core:           core,
			ListenerConfig: &configutil.Listener{Address: ln.Addr().String()},
		}),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          logger.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	// These two lines are the whole stdout contract: callers eval or parse them.
	if _, err := fmt.Fprintf(stdout, "VAULT_ADDR=http://%s\nVAULT_TOKEN=%s\n", ln.Addr(), token); err != nil {
		_ = srv.Close()
		return fmt.Errorf("write credentials to stdout: %w", err)
	}

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		return fmt.Errorf("http server: %w", err)
	}
	stop() // a second signal now kills the process the default way

	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
		return fmt.Errorf("http shutdown: %w", err)
	}
	return nil
}

// startCore builds an in-memory core with vault's own test helpers, initializes and unseals it,
// and mounts KV v2 at secret/. It returns the root token.
func startCore(ctx context.Context, tb *adapterTB, logger hclog.Logger) (core *vault.Core, token string, err error) {
	// The helpers report failure through tb.Fatal, which unwinds with a fatalError panic.
	defer func() {
		if r := recover(); r != nil {
			fe, ok := r.(fatalError)
			if !ok {
				panic(r)
			}
			err = fmt.Errorf("start vault core: %s", fe.msg)
		}
	}()

	// The mock builtin registry is the one vault's own tests use; it provides the approle auth
	// method, which the credential service's tests enable.
	core = vault.TestCoreWithConfig(tb, &vault.CoreConfig{
		Logger:          logger,
		BuiltinRegistry: corehelpers.NewMockBuiltinRegistry(),
	})
	token, _ = vault.TestInitUnsealCore(tb, core)

	rootCtx := namespace.RootContext(ctx)
	if err := handle(rootCtx, core, &logical.Request{
		Operation:   logical.UpdateOperation,
		ClientToken: token,
		Path:        "sys/mounts/secret",
		Data: map[string]any{
			"type":        "kv",
			"description": "key/value secret storage",
			"options":     map[string]string{"version": "2"},
		},
	}); err != nil {
		return nil, "", fmt.Errorf("mount kv v2 at secret/: %w", err)
	}
	if err := waitKVReady(rootCtx, core, token); err != nil {
		return nil, "", err
	}
	return core, token, nil
}

// waitKVReady polls secret/config: a new KV v2 mount answers with an "upgrading" error for a
// moment, and callers must be able to write as soon as the address is printed.
func waitKVReady(ctx context.Context, core *vault.Core, token string) error {
	ctx, cancel := context.WithTimeout(ctx, kvReadyTimeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := handle(ctx, core, &logical.Request{
			Operation:   logical.ReadOperation,
			ClientToken: token,
			Path:        "secret/config",
		})
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kv v2 at secret/ not ready after %s: %w", kvReadyTimeout, err)
		case <-tick.C:
		}
	}
}

func handle(ctx context.Context, core *vault.Core, req *logical.Request) error {
	resp, err := core.HandleRequest(ctx, req)
	if err != nil {
		return err
	}
	if resp != nil && resp.IsError() {
		return resp.Error()
	}
	return nil
}

// checkLoopback refuses anything but a loopback address: the server speaks plain HTTP and hands
// out a root token, so it must not be reachable from other machines.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("-addr %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return errors.New("-addr must be a loopback address such as 127.0.0.1:8200 (plain HTTP with a root token)")
	}
	return nil
}
