package cli

import (
	"cmp"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// newAgentsCmd manages agents' bus identities (mcpbus up's embedded NATS).
func newAgentsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "agents",
		Short: "Create, list and revoke the NATS identities of agents (mcpbus up)",
		Long: `An agent identity is an nkey user of mcpbus up's NATS server that may call the tools
its globs match (and list them, cancel its own calls, follow its servers' live events),
nothing else. It requests under its own subject prefix mcp.v1.agent.<name>, which only it
may publish to, so the runners know who calls and check its globs and its share of a
server's calls. Its seed is written to a 0600 file on the host of mcpbus up; connect with
it and its inbox prefix:
  nats --nkey <seed file> --inbox-prefix <inbox prefix> req mcp.v1.agent.<name>.call.everything.echo '{"message":"hi"}'`,
	}
	cmd.AddCommand(newAgentsCreateCmd(g), newAgentsListCmd(g), newAgentsRevokeCmd(g))
	return cmd
}

func (g *globals) agentsRequest(cmd *cobra.Command, verb string, in, out any) error {
	nc, _, err := g.connect(cmd.Context())
	if err != nil {
		return err
	}
	defer nc.Close()
	return bus.RequestJSON(cmd.Context(), nc, bus.NewSubjects(g.bus.Prefix).Service("agents", verb), in, out, g.timeout)
}

func newAgentsCreateCmd(g *globals) *cobra.Command {
	var req model.AgentCreateRequest
	var rps float64
	var burst int
	cmd := &cobra.Command{
		Use:     "create <name>",
		Short:   "Make an agent identity allowed some tools",
		Example: `  mcpbus agents create ci --allow-tool 'github__*' --allow-tool 'everything__echo'`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Name = args[0]
			if cmd.Flags().Changed("rps") || cmd.Flags().Changed("burst") {
				req.Rate = &model.KeyRate{RPS: cmp.Or(rps, model.DefaultAgentRate.RPS), Burst: cmp.Or(burst, model.DefaultAgentRate.Burst)}
			}
			var out model.Agent
			if err := g.agentsRequest(cmd, "create", req, &out); err != nil {
				return err
			}
			if g.json {
				return g.printJSON(out)
			}
			fmt.Fprintf(g.stdout, "agent %s: seed %s, inbox prefix %s, subject prefix %s\nmay request: %s\n", out.Name, out.SeedFile, out.InboxPrefix, out.SubjectPrefix, strings.Join(out.Subjects, " "))
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&req.Allow, "allow-tool", nil, "a glob on <server>__<tool> the agent may call (repeat; default every tool)")
	cmd.Flags().IntVar(&req.MaxInflight, "max-inflight", 0, "its calls in flight at one server (default: the runner's --agent-max-inflight, a quarter of a server's max_inflight)")
	cmd.Flags().Float64Var(&rps, "rps", 0, fmt.Sprintf("its requests per second at each runner (default %g)", model.DefaultAgentRate.RPS))
	cmd.Flags().IntVar(&burst, "burst", 0, fmt.Sprintf("its burst of requests at each runner (default %d)", model.DefaultAgentRate.Burst))
	return cmd
}

func newAgentsListCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List agent identities",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var out model.AgentList
			if err := g.agentsRequest(cmd, "list", struct{}{}, &out); err != nil {
				return err
			}
			if g.json {
				return g.printJSON(out)
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "AGENT\tALLOW\tCREATED\tSEED FILE")
			for _, a := range out.Agents {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", a.Name, strings.Join(a.Allow, ","), a.Created.Format(time.RFC3339), a.SeedFile)
			}
			return tw.Flush()
		},
	}
}

func newAgentsRevokeCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke <name>",
		Short: "Revoke an agent identity: it can no longer connect, and its connections are closed",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var out model.AgentRef
			if err := g.agentsRequest(cmd, "revoke", model.AgentRef{Name: args[0]}, &out); err != nil {
				return err
			}
			if g.json {
				return g.printJSON(out)
			}
			fmt.Fprintf(g.stdout, "agent %s revoked\n", out.Name)
			return nil
		},
	}
}
