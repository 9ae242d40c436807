package cli

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/mcpbus/mcpbus/libs/model"
)

// newToolsReviewCmd lists the tools whose definition changed since it was
// pinned, with what changed.
func newToolsReviewCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "review [server]",
		Short: "Show the tools whose definition changed since it was pinned (and, under pin strict, are withheld)",
		Long: `Show the tools whose definition (description, schemas, annotations) changed since it was
first seen and pinned, with the old and new text of what changed. Under a server's pin policy
strict (the default for servers from a registry) such a tool is withheld from every client until
it is approved with "mcpbus tools approve <server> <tool> <hash>".`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			nc, c, err := g.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer nc.Close()
			server := ""
			if len(args) == 1 {
				server = args[0]
			}
			changes, err := c.ToolsReview(cmd.Context(), server)
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(model.ToolsReviewReply{Changes: changes})
			}
			if len(changes) == 0 {
				fmt.Fprintln(g.stdout, "no tool changed since it was pinned")
				return nil
			}
			for _, p := range changes {
				fmt.Fprintf(g.stdout, "%s.%s changed (%s); seen %s\n", p.Server, printable(p.Tool),
					strings.Join(model.ChangedFields(p.Definition, p.Pending.Definition), ", "), p.Pending.SeenAt.Format("2006-01-02 15:04:05Z07:00"))
				printDefinitionDiff(g, p.Definition, p.Pending.Definition)
				fmt.Fprintf(g.stdout, "  approve: mcpbus tools approve %s %s %s\n\n", p.Server, printable(p.Tool), p.Pending.Hash)
			}
			return nil
		},
	}
}

// printDefinitionDiff prints each changed member of two definitions, the
// pinned one (-) above the new one (+).
func printDefinitionDiff(g *globals, pinned, pending json.RawMessage) {
	var a, b map[string]json.RawMessage
	_ = json.Unmarshal(pinned, &a)
	_ = json.Unmarshal(pending, &b)
	for _, field := range model.ChangedFields(pinned, pending) {
		fmt.Fprintf(g.stdout, "  %s\n    - %s\n    + %s\n", field, oneLine(string(a[field]), 200), oneLine(string(b[field]), 200))
	}
}

// newToolsApproveCmd pins a pending definition, or rejects it.
func newToolsApproveCmd(g *globals) *cobra.Command {
	var reject bool
	cmd := &cobra.Command{
		Use:   "approve <server> <tool> <hash>",
		Short: "Approve (pin) a tool's changed definition, named by the hash `tools review` shows",
		Args:  cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			nc, c, err := g.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer nc.Close()
			pin, err := c.ToolsApprove(cmd.Context(), model.ToolsApproveRequest{Server: args[0], Tool: args[1], Hash: args[2], Reject: reject})
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(pin)
			}
			if reject {
				fmt.Fprintf(g.stdout, "rejected: %s.%s stays withheld while its server offers that definition\n", args[0], args[1])
			} else {
				fmt.Fprintf(g.stdout, "approved: %s.%s is pinned at %s\n", args[0], args[1], pin.Hash)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&reject, "reject", false, "reject the change instead (the tool stays withheld)")
	return cmd
}
