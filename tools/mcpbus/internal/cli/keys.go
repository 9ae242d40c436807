package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

func newKeysCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Create, list and revoke the gateway's API keys",
	}
	cmd.AddCommand(newKeysCreateCmd(g), newKeysListCmd(g), newKeysRevokeCmd(g))
	return cmd
}

// keysRequest sends one mcp.v1.keys.<verb> request to the gateway.
func (g *globals) keysRequest(cmd *cobra.Command, verb string, in, out any) error {
	nc, _, err := g.connect(cmd.Context())
	if err != nil {
		return err
	}
	defer nc.Close()
	return bus.RequestJSON(cmd.Context(), nc, bus.NewSubjects(g.bus.Prefix).Service("keys", verb), in, out, g.timeout)
}

func newKeysCreateCmd(g *globals) *cobra.Command {
	req := model.KeyCreateRequest{}
	var rps float64
	var burst int
	cmd := &cobra.Command{
		Use:   "create <name>",
		Short: "Create an API key; it is printed once and never again",
		Example: `  mcpbus keys create ci-agent --scope call --allow-tool 'github__*' --deny-tool '*__delete_*'
  mcpbus keys create big-catalog --tools-mode search --pin-tool github__create_issue
  mcpbus keys create ops --scope admin`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Name = args[0]
			if cmd.Flags().Changed("rps") || cmd.Flags().Changed("burst") {
				req.Rate = &model.KeyRate{RPS: rps, Burst: burst}
			}
			var out model.KeyCreateReply
			if err := g.keysRequest(cmd, "create", req, &out); err != nil {
				return err
			}
			if g.json {
				return g.printJSON(out)
			}
			fmt.Fprintf(g.stdout, "%s\n", out.Key)
			fmt.Fprintf(g.stderr, "key %s (%s, scopes %v): store it now, it is not shown again; send it as 'Authorization: Bearer <key>'\n", out.ID, out.Name, out.Scopes)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&req.Scopes, "scope", []string{model.KeyScopeCall}, "admin, call and/or chat (chat: conversations with the chat profiles over HTTP)")
	f.StringArrayVar(&req.Tools.Allow, "allow-tool", nil, "only tools whose <server>__<tool> name matches this glob (repeat)")
	f.StringArrayVar(&req.Tools.Deny, "deny-tool", nil, "never tools matching this glob (repeat)")
	f.StringVar(&req.ToolsMode, "tools-mode", "", "search: the key's /mcp lists search_tools and call_tool instead of every tool (default: every tool)")
	f.StringArrayVar(&req.PinnedTools, "pin-tool", nil, "with --tools-mode search, also list this <server>__<tool> (repeat)")
	f.Float64Var(&rps, "rps", 0, "requests per second for this key (default: the gateway's)")
	f.IntVar(&burst, "burst", 0, "burst for this key (default: the gateway's)")
	return cmd
}

func newKeysListCmd(g *globals) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List API keys (never their secrets)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var out model.KeyListReply
			if err := g.keysRequest(cmd, "list", model.KeyListRequest{IncludeRevoked: all}, &out); err != nil {
				return err
			}
			if g.json {
				return g.printJSON(out)
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tSCOPES\tTOOLS\tCREATED\tREVOKED")
			for _, k := range out.Keys {
				tools := "all"
				if !k.Tools.IsZero() {
					tools = fmt.Sprintf("allow %v deny %v", k.Tools.Allow, k.Tools.Deny)
				}
				if k.ToolsMode != "" {
					tools += fmt.Sprintf(", %s mode, pinned %v", k.ToolsMode, k.PinnedTools)
				}
				revoked := ""
				if k.Revoked() {
					revoked = k.RevokedAt.Local().Format("2006-01-02 15:04")
				}
				fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\t%s\n", k.ID, k.Name, k.Scopes, tools, k.CreatedAt.Local().Format("2006-01-02 15:04"), revoked)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "include revoked keys")
	return cmd
}

func newKeysRevokeCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke <id>",
		Short: "Revoke an API key: refused at once by every gateway",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var out model.APIKey
			if err := g.keysRequest(cmd, "revoke", model.KeyRevokeRequest{ID: args[0]}, &out); err != nil {
				return err
			}
			if g.json {
				return g.printJSON(out)
			}
			fmt.Fprintf(g.stdout, "revoked %s (%s)\n", out.ID, out.Name)
			return nil
		},
	}
}
