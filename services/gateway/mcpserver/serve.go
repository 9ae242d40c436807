package mcpserver

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
)

// ServeStdio serves the aggregate to one client over stdin/stdout until the
// client hangs up or ctx ends, a line that is not a JSON-RPC message
// answered with its error (NewLineTransport). A nil p sees everything (a
// local command).
func (a *Aggregator) ServeStdio(ctx context.Context, p *auth.Principal) error {
	return a.Serve(ctx, p, NewLineTransport(os.Stdin, nopCloser{os.Stdout}))
}

// nopCloser leaves stdout open when the session ends, as go-sdk's
// StdioTransport does.
type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// Serve serves the aggregate to one client over any go-sdk transport (a
// request before initialize, or a second initialize, gets -32600, see
// initGate); in search mode when p's ToolsMode is search.
func (a *Aggregator) Serve(ctx context.Context, p *auth.Principal, t mcp.Transport) error {
	if p == nil {
		p = auth.Anonymous()
	}
	if !p.Can(auth.ScopeCall) {
		return apierr.New(apierr.Unauthorized, "this API key may not list or call tools (scope call)")
	}
	v, err := a.viewFor(p, p.SearchMode())
	if err != nil {
		return err
	}
	if err := v.server.Run(ctx, initGate{t}); err != nil && ctx.Err() == nil {
		return fmt.Errorf("mcpserver: serving: %w", err)
	}
	return nil
}
