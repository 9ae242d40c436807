package cli

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// newApprovalsCmd lists and decides the tool calls the gateway holds for
// approval, and reads or replaces its approval rules (mcp.v1.approvals.*).
func newApprovalsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "approvals",
		Short: "List, approve and deny the tool calls the gateway holds; read or set its approval rules",
		Long: `The gateway's approval rules say, per tool glob and caller, whether a call goes through (allow),
is refused (deny) or is held until a person approves it (ask); a held call not decided in time
(timeout_seconds, default 120) is denied. These commands talk to any gateway instance over the bus.`,
	}
	cmd.AddCommand(newApprovalsListCmd(g), newApprovalsDecideCmd(g, model.DecisionApprove), newApprovalsDecideCmd(g, model.DecisionDeny), newApprovalsRulesCmd(g))
	return cmd
}

func newApprovalsListCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the held tool calls waiting for a decision",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			nc, c, err := g.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer nc.Close()
			calls, err := c.Approvals(cmd.Context())
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(model.ApprovalsListReply{Calls: calls})
			}
			if len(calls) == 0 {
				fmt.Fprintln(g.stdout, "no call is held for approval")
				return nil
			}
			for _, h := range calls {
				fmt.Fprintf(g.stdout, "%s  %s  by %s  expires %s\n  arguments: %s\n", h.ID, h.Tool, h.Principal,
					h.ExpiresAt.Format("15:04:05Z07:00"), oneLine(string(h.Arguments), 200))
			}
			return nil
		},
	}
}

func newApprovalsDecideCmd(g *globals, decision string) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   decision + " <id>",
		Short: map[string]string{model.DecisionApprove: "Approve a held call: it runs", model.DecisionDeny: "Deny a held call: its caller gets an error"}[decision],
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			nc, c, err := g.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer nc.Close()
			h, err := c.DecideApproval(cmd.Context(), model.ApprovalDecideRequest{ID: args[0], Decision: decision, Reason: reason})
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(h)
			}
			fmt.Fprintf(g.stdout, "%s %s (%s)\n", h.ID, h.Decision, h.Tool)
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (shown to the caller with a denial)")
	return cmd
}

func newApprovalsRulesCmd(g *globals) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "rules",
		Short: "Print the approval rules, or replace them with --file",
		Example: `  mcpbus approvals rules
  mcpbus approvals rules --file rules.json   # {"rules":[{"tool":"github__delete_*","decision":"ask"}],"timeout_seconds":120}`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The file first: a missing or malformed one is a mistake to
			// report as such, bus or no bus.
			var in model.ApprovalRules
			if file != "" {
				data, err := os.ReadFile(file)
				if err != nil {
					return apierr.Wrap(apierr.Validation, "reading "+file+": "+err.Error(), err).WithField("file")
				}
				if err := json.Unmarshal(data, &in); err != nil {
					return apierr.Invalid("file", fmt.Sprintf("%s is not approval rules: %v", file, err))
				}
			}
			nc, c, err := g.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer nc.Close()
			var r model.ApprovalRules
			if file == "" {
				r, err = c.ApprovalRules(cmd.Context())
			} else {
				r, err = c.SetApprovalRules(cmd.Context(), in)
			}
			if err != nil {
				return err
			}
			return g.printJSON(r)
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "a JSON file of approval rules to store (replacing the current ones)")
	return cmd
}
