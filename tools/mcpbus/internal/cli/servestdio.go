package cli

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/telemetry"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
	"github.com/mcpbus/mcpbus/services/gateway/mcpserver"
	"github.com/mcpbus/mcpbus/services/runner/runner"
)

// newServeStdioCmd serves the aggregated MCP endpoint over stdin/stdout, for
// MCP clients that can only spawn a command (Claude Desktop, many IDEs).
func newServeStdioCmd(g *globals) *cobra.Command {
	var filter model.ToolFilter
	var mode string
	var pins []string
	cmd := &cobra.Command{
		Use:   "serve-stdio",
		Short: "Serve every tool mcpbus runs as one MCP server over stdio (for clients that spawn commands)",
		Long: `serve-stdio connects to the bus and speaks MCP on stdin/stdout: the tools of every
running server as <server>__<tool>, their resources and prompts, calls routed over the
bus. Logs go to stderr. Point a client at it, e.g. in claude_desktop_config.json:
  {"mcpServers": {"mcpbus": {"command": "mcpbus", "args": ["serve-stdio"]}}}
With an agent's seed (--nats-nkey <data-dir>/nats/agent-<name>.nk, made by
mcpbus agents create) it serves only the tools that agent may call, through
the agent's own subjects. With --tools search the client sees search_tools and
call_tool (plus any --pin-tool) instead of every tool, as /mcp?tools=search.`,
		Example: `  mcpbus serve-stdio --tools search --pin-tool filesystem__read_text_file`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case mode != "all" && mode != model.KeyToolsModeSearch:
				return apierr.Invalid("tools", fmt.Sprintf("--tools must be all or search, not %q", mode))
			case len(pins) > 0 && mode != model.KeyToolsModeSearch:
				return apierr.Invalid("pinned_tools", "--pin-tool needs --tools search (every tool is listed otherwise)")
			}
			// Traced as the gateway is (docs/operating.md, Tracing): without a
			// tracer provider this hop's spans were never exported, and the
			// runner's hung under a parent no backend had.
			shutdownTel, err := telemetry.Setup(cmd.Context(), "mcpbus-serve-stdio", runner.Version)
			if err != nil {
				return err
			}
			defer func() {
				c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = shutdownTel(c)
			}()
			nc, _, err := g.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer nc.Close()
			log := slog.New(slog.NewJSONHandler(g.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			agent := g.agent()
			g.abort.Store(nil) // a refused publish is logged, and the server goes on
			agg, err := mcpserver.New(cmd.Context(), nc, mcpserver.Options{Prefix: g.bus.Prefix, Logger: log, NoAuth: true, Agent: agent, Local: true})
			if err != nil {
				return fmt.Errorf("serve-stdio: %w", g.refused(err))
			}
			defer agg.Close()
			p := auth.Anonymous()
			p.Name, p.Tools, p.PinnedTools = "serve-stdio", filter, pins
			if mode == model.KeyToolsModeSearch {
				p.ToolsMode = mode
			}
			return agg.ServeStdio(cmd.Context(), p)
		},
	}
	cmd.Flags().StringArrayVar(&filter.Allow, "allow-tool", nil, "only tools whose <server>__<tool> name matches this glob (repeat)")
	cmd.Flags().StringArrayVar(&filter.Deny, "deny-tool", nil, "never tools matching this glob (repeat)")
	cmd.Flags().StringVar(&mode, "tools", "all", "all: list every tool; search: only search_tools and call_tool (for catalogs too large for the client's model)")
	cmd.Flags().StringArrayVar(&pins, "pin-tool", nil, "with --tools search, also list this <server>__<tool> (repeat)")
	return cmd
}
