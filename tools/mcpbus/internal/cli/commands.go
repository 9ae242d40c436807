package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
)

func newToolsCmd(g *globals) *cobra.Command {
	var server string
	cmd := &cobra.Command{
		Use:   "tools",
		Short: "List the tools of running servers",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			nc, c, err := g.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer nc.Close()
			tools, err := c.ListTools(cmd.Context(), server)
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(model.ToolsListReply{Tools: tools})
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSUBJECT\tDESCRIPTION")
			for _, t := range tools {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", t.Name, t.Subject, oneLine(t.Description, 60))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&server, "server", "", "only this server's tools")
	cmd.AddCommand(newToolsReviewCmd(g), newToolsApproveCmd(g), newToolsSearchCmd(g))
	return cmd
}

func newCallCmd(g *globals) *cobra.Command {
	var progress bool
	cmd := &cobra.Command{
		Use:   "call <server>.<tool> ['<json arguments>' | -]",
		Short: "Call a tool; arguments are a JSON object (- reads them from stdin)",
		Long: `Call a tool; arguments are a JSON object (- reads them from stdin).

The result's text is printed (--json: the whole CallToolResult). A result the
tool marked as an error (isError) exits with status 1, with or without --json;
an error of the bus exits 1 too (with --json, printed as {code, message, field}).`,
		Example: `  mcpbus call everything.echo '{"message":"hi"}'
  echo '{"a":1,"b":2}' | mcpbus call everything.get-sum -`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			server, tool, raw, err := toolCallArgs(g, args)
			if err != nil {
				return err
			}
			nc, c, err := g.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer nc.Close()
			opts := &client.CallOptions{}
			if progress {
				opts.OnProgress = func(ev model.ProgressEvent) { fmt.Fprintln(g.stderr, progressLine(ev)) }
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			res, err := c.Call(ctx, server, tool, raw, opts)
			if err != nil {
				return err
			}
			return printResult(g, res)
		},
	}
	cmd.Flags().BoolVar(&progress, "progress", false, "print progress notifications to stderr")
	return cmd
}

// progressLine is one progress notification for people: "progress 2/4",
// or "progress 2" when the server gives no total, then its message if any.
func progressLine(ev model.ProgressEvent) string {
	line := fmt.Sprintf("progress %g", ev.Progress)
	if ev.Total > 0 {
		line += fmt.Sprintf("/%g", ev.Total)
	}
	if ev.Message != "" {
		line += " " + printable(ev.Message) // the server's text: no control sequences
	}
	return line
}

// printResult prints a CallToolResult: JSON as is with --json, else its text
// content (and structured content) for people.
func printResult(g *globals, res json.RawMessage) error {
	if g.json {
		if _, err := fmt.Fprintln(g.stdout, string(res)); err != nil {
			return err
		}
		// The exit status says what it says without --json: scripts test it.
		var r struct {
			IsError bool `json:"isError"`
		}
		if json.Unmarshal(res, &r) == nil && r.IsError {
			return silentExit(1)
		}
		return nil
	}
	var r struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
			MIME string `json:"mimeType"`
		} `json:"content"`
		Structured json.RawMessage `json:"structuredContent"`
		IsError    bool            `json:"isError"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		_, err = fmt.Fprintln(g.stdout, string(res))
		return err
	}
	for _, c := range r.Content {
		if c.Type == "text" {
			fmt.Fprintln(g.stdout, c.Text)
		} else {
			fmt.Fprintf(g.stdout, "[%s content %s]\n", printable(c.Type), printable(c.MIME))
		}
	}
	if len(r.Structured) > 0 && len(r.Content) == 0 {
		fmt.Fprintln(g.stdout, string(r.Structured))
	}
	if r.IsError {
		// The tool ran and failed (its message is above): exit 1, without an
		// error code of the bus (SERVICE_UNAVAILABLE told people to retry).
		fmt.Fprintln(g.stderr, "error: the tool reported an error (isError)")
		return silentExit(1)
	}
	return nil
}

func newStatusCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status [server]",
		Short: "Show the state of every server (or one)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			nc, c, err := g.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer nc.Close()
			var list []model.Status
			if len(args) == 1 {
				var st model.Status
				if st, err = c.Runtime(cmd.Context(), "status", args[0]); err == nil {
					list = []model.Status{st}
				}
			} else {
				list, err = c.Status(cmd.Context())
			}
			if client.NoRunner(err) {
				// No runner up is when the stored states matter most.
				fmt.Fprintln(g.stderr, "no runner answers mcp.v1.runtime.status: the last stored states follow")
				server := ""
				if len(args) == 1 {
					server = args[0]
				}
				list, err = c.StoredStatus(cmd.Context(), server)
			}
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(model.RuntimeStatusReply{Servers: list})
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SERVER\tSTATE\tRUNNER\tTOOLS\tUPTIME\tRESTARTS\tCALLS\tERRORS\tMESSAGE")
			for _, s := range list {
				up := ""
				if !s.StartedAt.IsZero() && s.State == model.StateRunning {
					up = time.Since(s.StartedAt).Round(time.Second).String()
				}
				state := s.State
				if s.ReplicasWanted > 1 {
					state = fmt.Sprintf("%s (%d/%d replicas)", s.State, s.Replicas, s.ReplicasWanted)
				}
				msg := s.Message
				if !s.RetryAt.IsZero() {
					msg += fmt.Sprintf(" (retry in %s)", time.Until(s.RetryAt).Round(100*time.Millisecond))
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%d\t%d\t%s\n", s.Server, state, shortID(s.Runner), len(s.Tools), up, s.Restarts, s.Calls, s.Errors, oneLine(msg, 60))
			}
			return tw.Flush()
		},
	}
}

func newRuntimeCmd(g *globals, verb string) *cobra.Command {
	return &cobra.Command{
		Use:   verb + " <server>",
		Short: strings.ToUpper(verb[:1]) + verb[1:] + " a server",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			nc, c, err := g.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer nc.Close()
			st, err := c.Runtime(cmd.Context(), verb, args[0])
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(st)
			}
			fmt.Fprintf(g.stdout, "%s: %s\n", st.Server, st.State)
			return nil
		},
	}
}

func newRPCCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "rpc <server> <method> ['<json params>']",
		Short:   "Send another MCP method (resources/list, prompts/get, ping, …) to a server",
		Example: `  mcpbus rpc everything resources/list`,
		Args:    cobra.RangeArgs(2, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			nc, c, err := g.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer nc.Close()
			var params any
			if len(args) == 3 {
				params = json.RawMessage(args[2])
				if !json.Valid([]byte(args[2])) {
					return apierr.Invalid("params", "params must be JSON")
				}
			}
			var out json.RawMessage
			if err := c.RPC(cmd.Context(), args[0], args[1], params, &out); err != nil {
				return err
			}
			var v any
			_ = json.Unmarshal(out, &v)
			return g.printJSON(v)
		},
	}
}

func newEventsCmd(g *globals) *cobra.Command {
	var kind string
	var replay bool
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Follow events (status, config, call, chat) until interrupted",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			nc, c, err := g.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer nc.Close()
			filter := ""
			if kind != "" {
				filter = c.Subjects().EventsOf(kind)
			}
			return c.FollowEvents(cmd.Context(), filter, replay, func(ev client.Event) {
				if g.json {
					fmt.Fprintf(g.stdout, "{\"subject\":%q,\"time\":%q,\"data\":%s}\n", ev.Subject, ev.Time.Format(time.RFC3339Nano), ev.Data)
					return
				}
				fmt.Fprintf(g.stdout, "%s %-6s %-20s %s\n", ev.Time.Format("15:04:05.000"), ev.Kind, ev.Name, oneLine(string(ev.Data), 200))
			})
		},
	}
	cmd.Flags().StringVar(&kind, "kind", "", "only events of this kind: status, config, call or chat")
	cmd.Flags().BoolVar(&replay, "replay", false, "start from the oldest stored event instead of new ones")
	return cmd
}

func newRunnersCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "runners",
		Short: "List the live runner instances and their load",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			nc, c, err := g.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer nc.Close()
			runners, err := c.Runners(cmd.Context(), 0)
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(map[string]any{"runners": runners})
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "RUNNER\tVERSION\tSERVERS\tCALLS\tERRORS\tOWNS")
			for _, r := range runners {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\n", r.ID, r.Version, len(r.Servers), r.Calls, r.Errors, oneLine(strings.Join(r.Servers, ","), 60))
			}
			return tw.Flush()
		},
	}
}

// shortID keeps a uuid readable in a table.
func shortID(id string) string {
	if len(id) == 36 && strings.Count(id, "-") == 4 {
		return id[:8]
	}
	return id
}

func oneLine(s string, max int) string {
	s = printable(strings.Join(strings.Fields(s), " "))
	if len(s) > max {
		// At a character boundary: half a character is invalid UTF-8.
		cut := max - 1
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return s[:cut] + "…"
	}
	return s
}
