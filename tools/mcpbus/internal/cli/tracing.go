package cli

import (
	"context"
	"errors"
	"time"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/telemetry"
	"github.com/mcpbus/mcpbus/libs/telemetry/conv"
	"github.com/mcpbus/mcpbus/services/runner/runner"
)

// cliService is the service name of a client command's spans.
const cliService = "mcpbus-cli"

// traceFlushTimeout bounds the export of a command's spans at its exit: a
// collector that is down or does not answer costs the command at most this.
const traceFlushTimeout = 2 * time.Second

// commandTrace is the trace of one client command: its root span and the
// flush of its exporter.
type commandTrace struct {
	span     trace.Span
	shutdown func(context.Context) error
}

// ownsTracing reports whether cmd runs services (up, serve, serve-stdio),
// which set up their own tracing for as long as they run.
func ownsTracing(cmd *cobra.Command) bool {
	for c := cmd; c.HasParent(); c = c.Parent() {
		if !c.Parent().HasParent() { // c is a command of the root
			switch c.Name() {
			case "up", "serve", "serve-stdio":
				return true
			}
		}
	}
	return false
}

// startTrace makes a client command one trace when the environment asks for
// export (the same OTEL_* variables as mcpbus up): a root span named after
// the command ("mcpbus servers list"), in the context cmd runs with, so
// each of its bus requests is a send span under it and the services'
// spans continue it. Without export nothing is set up: the bus makes no
// spans then, and sends no trace context.
func (g *globals) startTrace(cmd *cobra.Command) error {
	if !telemetry.Enabled() || ownsTracing(cmd) {
		return nil
	}
	shutdown, err := telemetry.SetupCommand(cmd.Context(), cliService, runner.Version)
	if err != nil {
		return err
	}
	// The arguments are not recorded: they may hold secrets (cred set).
	ctx, span := otel.Tracer(cliService).Start(cmd.Context(), cmd.CommandPath())
	cmd.SetContext(ctx)
	g.trace = &commandTrace{span: span, shutdown: shutdown}
	return nil
}

// endTrace ends the command's root span (an error marks it ERROR, with its
// code as error.type) and exports what is left, for at most
// traceFlushTimeout.
func (g *globals) endTrace(err error) {
	t := g.trace
	if t == nil {
		return
	}
	g.trace = nil
	if err != nil {
		code := string(apierr.Of(err))
		var exit silentExit
		if errors.As(err, &exit) {
			code = "exit_status" // the cause was printed, not returned
		}
		t.span.SetAttributes(conv.ErrorType.String(code))
		t.span.SetStatus(codes.Error, telemetry.StatusText(err.Error()))
	}
	t.span.End()
	ctx, cancel := context.WithTimeout(context.Background(), traceFlushTimeout)
	defer cancel()
	_ = t.shutdown(ctx) // a lost trace is no reason to fail the command
}
