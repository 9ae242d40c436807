package cli

import (
	"github.com/spf13/cobra"

	"github.com/mcpbus/mcpbus/libs/service"
	"github.com/mcpbus/mcpbus/libs/settings"
	"github.com/mcpbus/mcpbus/tools/mcpbus/stack"
)

// newServeCmd runs one service of the table alone against an existing NATS
// server: `mcpbus serve runner`, with the same settings, defaults and code
// as inside `mcpbus up`.
func newServeCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve <service>",
		Short: "Run one mcpbus service alone against an existing NATS server (one container per service)",
		Long: `serve runs one service of mcpbus against the NATS server(s) of --nats (a list: the
first is tried first), waiting for NATS and JetStream as long as it takes. Settings are
the same flags and env vars as in mcpbus up; add --nats-creds/--nats-nkey and --nats-ca,
--nats-cert, --nats-key for an authenticated, TLS bus.`,
	}
	var o stack.Options
	for _, r := range o.Table() {
		var h service.Host
		sub := &cobra.Command{
			Use:   r.Def.Name,
			Short: r.Def.Summary,
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return service.RunAlone(cmd.Context(), r.Def, g.bus, h, r.Opts, g.stderr)
			},
		}
		s := settings.New(sub.Flags())
		h.Register(s)
		r.Opts.Register(s)
		cmd.AddCommand(sub)
	}
	return cmd
}
