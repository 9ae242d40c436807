// Package cli is the mcpbus command line: the all-in-one `up` and the client
// commands, each with --json and --nats.
package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/mcpbus/mcpbus/libs/access"
	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/natsconn"
	"github.com/mcpbus/mcpbus/libs/service"
	"github.com/mcpbus/mcpbus/libs/settings"
)

// globals are the flags every client command shares.
type globals struct {
	bus     service.Bus
	json    bool
	timeout time.Duration
	stdin   io.Reader
	stdout  io.Writer
	stderr  io.Writer
	// violation is the last permissions violation the bus reported to this
	// process's connection: the cause of a request that then times out.
	violation atomic.Pointer[string]
	// abort ends the command at a publish the bus refused (nil: go on, as
	// the long-running serve-stdio does), so it fails at once instead of
	// waiting out its request.
	abort atomic.Pointer[context.CancelFunc]
	// unparsed is set when a flag could not be parsed: the flags after it,
	// --json among them, were not read.
	unparsed bool
	// trace is the running client command's trace (nil: not traced).
	trace *commandTrace
}

// agent is the agent whose seed the CLI connects with (an nkey file named
// agent-<name>.nk, as mcpbus agents create writes it), or "".
func (g *globals) agent() string {
	name := strings.TrimSuffix(filepath.Base(g.bus.NATS.NKeyFile), access.SeedExt)
	agent, _ := strings.CutPrefix(name, access.AgentIdentityPrefix)
	if g.bus.NATS.NKeyFile == "" || agent == name {
		return ""
	}
	return agent
}

// refused names the permission the bus refused when err (a timeout, most
// often) followed one: NATS reports a violation apart from the request it
// breaks, which would otherwise just time out.
func (g *globals) refused(err error) error {
	if v := g.violation.Load(); v != nil && err != nil {
		return apierr.Wrap(apierr.Unauthorized, "the bus refused this identity: "+*v, err)
	}
	return err
}

// Main runs the CLI and returns the process exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	g := &globals{stdin: stdin, stdout: stdout, stderr: stderr}
	root := newRoot(g)
	g.strictUsage(root)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, abort := context.WithCancel(ctx)
	defer abort()
	g.abort.Store(&abort)
	err := root.ExecuteContext(ctx)
	g.endTrace(err)
	if err != nil {
		var exit silentExit
		if errors.As(err, &exit) {
			return int(exit)
		}
		if g.unparsed {
			g.json = jsonRequested(args)
		}
		g.printError(err)
		return 1
	}
	return 0
}

func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:           "mcpbus",
		Short:         "Run MCP servers as services on NATS, and talk to them",
		Long:          "mcpbus runs Model Context Protocol servers for AI agents as event-driven services over NATS.\n`mcpbus up` starts everything in one process; the other commands talk to a running bus.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	g.bus.Register(settings.New(pf))
	// Env vars fill what the command line left unset; a malformed one is an error.
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if err := settings.ApplyEnv(cmd.Flags()); err != nil {
			return err
		}
		// Zero or less made the client take its default for some requests and
		// made call and tasks time out at once for others.
		if g.timeout <= 0 {
			return apierr.Invalid("timeout", fmt.Sprintf("--timeout must be positive, not %s", g.timeout))
		}
		return g.startTrace(cmd)
	}
	pf.BoolVar(&g.json, "json", false, "print JSON instead of tables")
	pf.DurationVar(&g.timeout, "timeout", 35*time.Second, "how long to wait for an answer")
	root.AddCommand(newUpCmd(g), newServersCmd(g), newCredCmd(g), newSearchCmd(g), newAddCmd(g), newKeysCmd(g), newTokensCmd(g), newServeStdioCmd(g), newToolsCmd(g), newCallCmd(g), newStatusCmd(g), newEventsCmd(g), newRPCCmd(g), newRunnersCmd(g), newTasksCmd(g), newServeCmd(g), newAgentsCmd(g), newIdentitiesCmd(g), newHealthCmd(g), newProfilesCmd(g), newChatCmd(g), newConnectCmd(g), newApprovalsCmd(g), newAuditCmd(g))
	for _, verb := range []string{"start", "stop", "restart"} {
		root.AddCommand(newRuntimeCmd(g, verb))
	}
	return root
}

// connect opens the client connection of a client command.
func (g *globals) connect(ctx context.Context) (*nats.Conn, *client.Client, error) {
	o := g.bus.NATS
	if o.CredsFile == "" && o.NKeyFile == "" {
		// As admin.key: the operator identity mcpbus up made in its data dir.
		if f := operatorSeed(); f != "" {
			o.NKeyFile = f
		}
	}
	nc, err := o.Dial("mcpbus-cli", natsconn.FailFast, nil, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			msg := err.Error()
			g.violation.Store(&msg)
			if abort := g.abort.Load(); abort != nil && strings.Contains(msg, "Publish") {
				(*abort)()
			}
		}
	}))
	if errors.Is(err, nats.ErrAuthorization) || (err != nil && strings.Contains(strings.ToLower(err.Error()), "authorization violation")) {
		return nil, nil, apierr.Wrap(apierr.Unauthorized, fmt.Sprintf("NATS at %s refused the connection: it needs an identity (run where mcpbus up keeps .mcpbus, set MCPBUS_DATA_DIR, or give --nats-nkey)", o.URLs), err)
	}
	if err != nil {
		return nil, nil, apierr.Wrap(apierr.ServiceUnavailable, fmt.Sprintf("cannot reach NATS at %s (is `mcpbus up` running?)", g.bus.NATS.URLs), err)
	}
	return nc, client.New(nc, client.Options{Prefix: g.bus.Prefix, Timeout: g.timeout, Agent: g.agent()}), nil
}

// operatorSeed is the operator identity of a local mcpbus up
// ($MCPBUS_DATA_DIR or ./.mcpbus, then nats/operator.nk), or "" when there is none.
func operatorSeed() string {
	dir := cmp.Or(os.Getenv("MCPBUS_DATA_DIR"), service.DefaultDataDir)
	f := filepath.Join(dir, "nats", string(access.Operator)+access.SeedExt)
	if _, err := os.Stat(f); err != nil {
		return ""
	}
	return f
}

// printJSON writes v as indented JSON.
func (g *globals) printJSON(v any) error {
	enc := json.NewEncoder(g.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printError reports err: the error contract as JSON with --json, else one line.
func (g *globals) printError(err error) {
	switch apierr.Of(err) {
	case apierr.ServiceUnavailable, apierr.Network, apierr.Internal:
		err = g.refused(err)
	}
	var e *apierr.Error
	if !errors.As(err, &e) {
		e = &apierr.Error{Code: apierr.Validation, Message: err.Error()}
		if apierr.Of(err) != apierr.Internal {
			e = apierr.From(err)
		}
	}
	if g.json {
		enc := json.NewEncoder(g.stdout)
		_ = enc.Encode(e)
		return
	}
	// The message may quote a server (its JSON-RPC error, its start failure).
	if e.Field != "" {
		fmt.Fprintf(g.stderr, "error: %s: %s (field %s)\n", e.Code, printableLines(e.Message), printable(e.Field))
		return
	}
	fmt.Fprintf(g.stderr, "error: %s: %s\n", e.Code, printableLines(e.Message))
}
