package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/mcpbus/mcpbus/libs/procmem"
	"github.com/mcpbus/mcpbus/libs/secretfile"
	"github.com/mcpbus/mcpbus/libs/serverfile"
	"github.com/mcpbus/mcpbus/libs/service"
	"github.com/mcpbus/mcpbus/libs/settings"
	"github.com/mcpbus/mcpbus/libs/telemetry"
	"github.com/mcpbus/mcpbus/services/credential/credential"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/tools/mcpbus/stack"
)

type upOptions struct {
	natsHost   string
	natsPort   int
	natsStore  string
	dataDir    string
	configFile string
	logLevel   string
	insecure   bool
	metrics    string
	pprof      string
	memory     procmem.Options
	stack      stack.Options
}

func newUpCmd(g *globals) *cobra.Command {
	o := &upOptions{stack: stack.Options{Gateway: &gateway.Options{}}}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run every mcpbus service in one process, with an embedded NATS server",
		Long: `up starts an embedded NATS server with JetStream (files under --data-dir) and every
mcpbus service of the table (` + serviceNames() + `), each on its own in-process
connection, with the same settings as ` + "`mcpbus serve <service>`" + ` gives it alone.
Secrets are encrypted under --data-dir/secrets, or kept in Vault with --cred-backend vault.
It runs until interrupted.
With --config it first imports a servers file (mcpbus's own {"servers": [...]}, a Claude
Desktop / Cursor mcpServers JSON, or an mcp.yaml) through the config service; servers
already there with the same slug are updated, ${VAR} references come from the environment.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runUp(cmd.Context(), g, o) },
	}
	s := settings.New(cmd.Flags())
	s.String(&o.natsHost, "nats-host", "", "127.0.0.1", "address the embedded NATS listens on")
	s.Int(&o.natsPort, "nats-port", "", 4222, "port of the embedded NATS (0: a free port, named in the start-up message)")
	s.String(&o.natsStore, "nats-max-store", "", "",
		"JetStream file storage of the embedded NATS, e.g. 8GiB (K, M, G, T: powers of 1024); empty: nats-server's default, 75% of the data dir's free disk. "+
			"The streams and the tasks bucket reserve 6 GiB; on less each is made smaller, with a warning")
	s.String(&o.configFile, "config", "", "", "servers file to import at start")
	s.Bool(&o.insecure, "insecure-bus", "", false, "run NATS WITHOUT authentication: anyone who reaches its port may do anything on the bus")
	service.RegisterDataDir(s, &o.dataDir)
	service.RegisterLogLevel(s, &o.logLevel)
	service.RegisterMetricsAddr(s, &o.metrics)
	service.RegisterPprofAddr(s, &o.pprof)
	o.memory.Register(s)
	for _, r := range o.stack.Table() {
		r.Opts.Register(s)
	}
	return cmd
}

// serviceNames lists the table's services.
func serviceNames() string {
	var names []string
	for _, d := range stack.Services() {
		names = append(names, d.Name)
	}
	return strings.Join(names, ", ")
}

func runUp(ctx context.Context, g *globals, o *upOptions) error {
	if err := o.memory.Validate(); err != nil {
		return err
	}
	maxStore, err := parseSize(o.natsStore)
	if err != nil {
		return fmt.Errorf("--nats-max-store %q: %w", o.natsStore, err)
	}
	log, err := service.Logger(o.logLevel, g.stderr)
	if err != nil {
		return err
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
	// The operations endpoint answers /healthz (and /readyz: 503) while the stack starts.
	opsSrv, stopOps, err := service.StartOps(o.metrics, "mcpbus", runner.Version, log)
	if err != nil {
		return err
	}
	defer stopOps()
	stopPprof, err := service.StartPprof(o.pprof, log)
	if err != nil {
		return err
	}
	defer stopPprof()
	o.memory.Start(ctx, log)
	so := o.stack
	so.DataDir, so.NATSHost, so.NATSPort, so.Prefix, so.Logger = o.dataDir, o.natsHost, o.natsPort, g.bus.Prefix, log
	so.InsecureBus, so.NATSMaxStore = o.insecure, maxStore
	// Checked before anything is made in it (the keyfiles folder), as
	// stack.Start checks it again.
	if err := secretfile.PrivateDir(o.dataDir); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if so.Runner.KeyfilePrefixes == nil {
		// A single-host stack reads keyfiles from a folder of its data dir
		// made for them, and nowhere else unless --keyfile-prefixes says so.
		dir, err := filepath.Abs(filepath.Join(o.dataDir, runner.KeyfilesDir))
		if err == nil {
			err = os.MkdirAll(dir, 0o700)
		}
		if err != nil {
			return fmt.Errorf("keyfiles folder: %w", err)
		}
		so.Runner.KeyfilePrefixes = []string{dir}
	}
	if o.insecure {
		fmt.Fprintln(g.stderr, "WARNING: the bus runs WITHOUT authentication (--insecure-bus): anyone who can reach NATS at "+
			o.natsHost+" may read every call, answer it, and change every server")
		log.Warn("NATS authentication is OFF (--insecure-bus)")
	}
	st, err := stack.Start(ctx, so)
	if err != nil {
		return stoppedDuringStart(ctx, log, err)
	}
	defer st.Close()
	if o.configFile != "" {
		if err := loadServers(ctx, st, o.configFile, log); err != nil {
			return stoppedDuringStart(ctx, log, err)
		}
	}
	opsSrv.SetChecks(st.ReadyChecks(ctx)...)
	backend := cmp.Or(so.Credential.Backend, credential.BackendFile)
	log.Info("mcpbus up", "nats", st.NATS.ClientURL(), "data_dir", o.dataDir, "cred_backend", backend, "tracing", telemetry.Enabled())
	fmt.Fprintf(g.stderr, "mcpbus is up: NATS at %s, data in %s, secrets in %s. Try: mcpbus servers list; mcpbus tools\n", st.NATS.ClientURL(), o.dataDir, backend)
	if st.Identities != nil {
		fmt.Fprintf(g.stderr, "bus identities (nkeys, 0600) in %s; the CLI uses operator.nk from there (set MCPBUS_DATA_DIR when not in this directory); agents: mcpbus agents create\n", st.Identities.Dir())
	}
	for _, svc := range st.Services {
		if a, ok := svc.(service.Announcer); ok {
			a.Announce(g.stderr)
		}
	}
	o.memory.Ready(log)
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

// parseSize reads a size in bytes with an optional unit (K, M, G, T, alone
// or followed by B or iB, all powers of 1024 as in nats-server's own
// configuration); "" is 0.
func parseSize(v string) (int64, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, nil
	}
	num := strings.TrimRightFunc(v, unicode.IsLetter)
	unit := strings.ToUpper(strings.TrimSpace(v[len(num):]))
	unit = strings.TrimSuffix(strings.TrimSuffix(unit, "B"), "I")
	shift, ok := map[string]uint{"": 0, "K": 10, "M": 20, "G": 30, "T": 40}[unit]
	n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if !ok || err != nil || n < 0 || n > math.MaxInt64>>shift {
		return 0, errors.New("want a whole number of bytes, optionally with K, M, G or T (e.g. 8GiB, 500MB)")
	}
	return n << shift, nil
}
