package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
)

// The payloads of conversation log entries, as the chat service's loop
// writes them (services/chat/loop/state.go): only the fields shown here.
type (
	entryText struct {
		Text    string `json:"text"`
		Profile string `json:"profile"`
	}
	entryStep struct {
		Text      string `json:"text"`
		ToolCalls []struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"tool_calls"`
	}
	entryResult struct {
		Tool       string  `json:"tool"`
		State      string  `json:"state"`
		Content    string  `json:"content"`
		DurationMS float64 `json:"duration_ms"`
	}
	entryApproval struct {
		Tool     string `json:"tool"`
		Decision string `json:"decision"`
	}
)

func newChatListCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the conversations, most recent first (an admin's list has everyone's, with owners)",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withClient(cmd.Context(), func(c *client.Client) error {
				list, err := c.ChatList(cmd.Context())
				if err != nil {
					return err
				}
				if g.json {
					return g.printJSON(model.ChatListReply{Conversations: list})
				}
				return printConversations(g.stdout, list)
			})
		},
	}
}

func newChatHistoryCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "history <conversation>",
		Short: "Print a conversation: messages, tool calls and results, approvals",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withClient(cmd.Context(), func(c *client.Client) error {
				h, err := c.ChatHistory(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				if g.json {
					return g.printJSON(h)
				}
				printEntries(g, h.Entries)
				return nil
			})
		},
	}
}

func newChatRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "rm <conversation>...",
		Aliases: []string{"delete"},
		Short:   "Delete conversations",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withClient(cmd.Context(), func(c *client.Client) error {
				for _, id := range args {
					if err := c.ChatDelete(cmd.Context(), id); err != nil {
						return err
					}
					if !g.json {
						fmt.Fprintf(g.stdout, "conversation %s deleted\n", id)
					}
				}
				if g.json {
					return g.printJSON(map[string][]string{"deleted": args})
				}
				return nil
			})
		},
	}
}

// printRecent prints the last n messages of a continued conversation.
func printRecent(g *globals, entries []model.ChatEntry, n int) {
	var msgs []model.ChatEntry
	for _, e := range entries {
		if e.Kind == model.EntryUserMessage || e.Kind == model.EntryModelStep {
			msgs = append(msgs, e)
		}
	}
	if len(msgs) > n {
		fmt.Fprintf(g.stderr, "… %d earlier messages (mcpbus chat history)\n", len(msgs)-n)
		msgs = msgs[len(msgs)-n:]
	}
	printEntries(g, msgs)
}

// printEntries prints log entries for people, one or a few lines each.
func printEntries(g *globals, entries []model.ChatEntry) {
	w := g.stdout
	for _, e := range entries {
		at := e.At.Local().Format(time.TimeOnly)
		switch e.Kind {
		case model.EntryUserMessage:
			var p entryText
			_ = json.Unmarshal(e.Payload, &p)
			fmt.Fprintf(w, "%s you: %s\n", at, indent(p.Text))
		case model.EntryInstructions:
			var p entryText
			_ = json.Unmarshal(e.Payload, &p)
			fmt.Fprintf(w, "%s system: %s\n", at, indent(p.Text))
		case model.EntryModelStep:
			var p entryStep
			_ = json.Unmarshal(e.Payload, &p)
			if t := strings.TrimSpace(p.Text); t != "" {
				fmt.Fprintf(w, "%s model: %s\n", at, indent(t))
			}
			for _, c := range p.ToolCalls {
				fmt.Fprintf(w, "%s   → %s %s\n", at, printable(c.Name), oneLine(c.Arguments, 120))
			}
		case model.EntryToolResult:
			var p entryResult
			_ = json.Unmarshal(e.Payload, &p)
			mark := map[string]string{model.ToolCallCompleted: "✓", model.ToolCallFailed: "✗", model.ToolCallTimedOut: "⏱"}[p.State]
			fmt.Fprintf(w, "%s   %s %s (%s ms): %s\n", at, cmpStr(mark, "·"), printable(p.Tool), formatMS(p.DurationMS), oneLine(p.Content, 120))
		case model.EntryApproval:
			var p entryApproval
			_ = json.Unmarshal(e.Payload, &p)
			fmt.Fprintf(w, "%s   approval %s: %s\n", at, printable(p.Tool), printable(p.Decision))
		case model.EntryTurnEnd:
			var p model.ChatDone
			_ = json.Unmarshal(e.Payload, &p)
			if p.Reason != model.TurnFinal {
				fmt.Fprintf(w, "%s   turn ended: %s %s\n", at, printable(p.Reason), indent(p.Message))
			}
		}
	}
}

// indent keeps the continuation lines of a message under its first; the
// message is the model's or a user's, shown without control characters
// (termText).
func indent(s string) string {
	return strings.ReplaceAll(strings.TrimSpace(termText(s)), "\n", "\n           ")
}

// printConversations writes the list as a table. The OWNER column appears
// when some conversation belongs to another principal than the others (an
// admin's list): a user's own list is theirs alone.
func printConversations(w io.Writer, list []model.ChatConversation) error {
	owners := map[string]bool{}
	for _, cv := range list {
		owners[cv.Owner] = true
	}
	withOwner := len(owners) > 1
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if withOwner {
		fmt.Fprintln(tw, "CONVERSATION\tOWNER\tENTRIES\tLAST ACTIVITY")
	} else {
		fmt.Fprintln(tw, "CONVERSATION\tENTRIES\tLAST ACTIVITY")
	}
	for _, cv := range list {
		at := cv.LastActivity.Local().Format("2006-01-02 15:04:05")
		if withOwner {
			owner := cv.Owner
			if owner == "" {
				owner = "-" // stored before conversations had owners
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", cv.Conversation, owner, cv.Entries, at)
		} else {
			fmt.Fprintf(tw, "%s\t%d\t%s\n", cv.Conversation, cv.Entries, at)
		}
	}
	return tw.Flush()
}
