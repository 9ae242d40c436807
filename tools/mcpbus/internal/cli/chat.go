package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
)

// silentExit ends the command with an exit code, its cause already printed.
type silentExit int

func (e silentExit) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func newChatCmd(g *globals) *cobra.Command {
	var profile, message string
	var turnTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "chat [conversation]",
		Short: "Talk with a model that uses the bus's tools: interactive on a terminal, or one message with -m",
		Long: `Talk with a model through the chat service: its tool calls go to the MCP servers on the bus.

On a terminal it is interactive: the answer streams in, tool calls show as they run, a call the
profile says to ask about is asked inline, Ctrl-C cancels the running turn (a second Ctrl-C, or
Ctrl-D at the prompt, quits). The conversation id is printed on start: ` + "`mcpbus chat <id>`" + ` continues
it (with its profile, unless --profile names another).

With -m (or a message on stdin that is not a terminal) it sends one message, prints the answer to
stdout and the tool calls to stderr, and exits 1 when the turn ends in an error, 130 when it is
cancelled. --json prints every event as one JSON line instead. Approvals are then read from stdin
(y, n or a, one line each); no more input denies.`,
		Example: `  mcpbus chat --profile work
  mcpbus chat 0b6c1f9e-…                          # continue a conversation
  mcpbus chat --profile work -m "list the files in /tmp"
  mcpbus chat --profile work --json -m "hi" | jq -c 'select(.kind=="tool_call")'
  mcpbus chat list; mcpbus chat history <id>; mcpbus chat rm <id>`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			conv := ""
			if len(args) == 1 {
				conv = args[0]
			}
			// --json is for programs: one message, events on stdout, no prompt.
			interactive := message == "" && isTerminal(g.stdin) && !g.json
			if message == "" && !interactive {
				data, err := readAllLimited(g.stdin, model.MaxChatMessage)
				if err != nil {
					return apierr.Invalid("message", err.Error())
				}
				if message = strings.TrimSpace(string(data)); message == "" {
					return apierr.Invalid("message", "no message: give -m, or pipe it on stdin")
				}
			}
			nc, c, err := g.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer nc.Close()
			s := &chatSession{g: g, c: c, profile: profile, input: newLineInput(g.stdin),
				// Ctrl-C cancels a turn, not the whole command: signals are ours.
				ctx: context.WithoutCancel(cmd.Context()), turnTimeout: turnTimeout, probeEvery: 20 * time.Second, probeTimeout: 5 * time.Second,
				r: &renderer{out: g.stdout, errw: g.stderr, json: g.json, stream: interactive, spin: isTerminalOut(g.stderr) && !g.json}}
			s.sigs = make(chan os.Signal, 2)
			signal.Notify(s.sigs, os.Interrupt, syscall.SIGTERM)
			defer signal.Stop(s.sigs)
			joined, err := s.open(conv)
			if err != nil {
				return err
			}
			defer s.stop()
			if interactive {
				return s.repl(joined)
			}
			return s.oneShot(message)
		},
	}
	cmd.Flags().StringVarP(&profile, "profile", "p", "", "the profile of a new conversation (or switch a continued one to it)")
	cmd.Flags().StringVarP(&message, "message", "m", "", "send this one message, print the answer and exit")
	cmd.Flags().DurationVar(&turnTimeout, "turn-timeout", 30*time.Minute, "give up on (and cancel) a turn that runs longer")
	cmd.AddCommand(newChatListCmd(g), newChatHistoryCmd(g), newChatRmCmd(g))
	return cmd
}

// open names the conversation (a new uuid when none is given: the events are
// followed before the first message), checks the profile, and subscribes.
// It returns the history of a conversation that exists.
func (s *chatSession) open(conv string) (*model.ChatHistoryReply, error) {
	ctx, cancel := context.WithTimeout(s.ctx, s.g.timeout)
	defer cancel()
	var hist *model.ChatHistoryReply
	if conv == "" {
		conv = uuid.NewString()
	} else {
		if !model.ValidConversationID(conv) {
			return nil, apierr.Invalid("conversation", "a conversation id is a uuid or a slug")
		}
		h, err := s.c.ChatHistory(ctx, conv)
		switch {
		case err == nil && len(h.Entries) > 0:
			hist = &h
		case err != nil && apierr.Of(err) != apierr.NotFound:
			return nil, err
		case s.profile == "":
			return nil, apierr.Newf(apierr.NotFound, "conversation %s not found (start it with --profile)", conv).WithField("conversation")
		}
	}
	s.conv = conv
	if hist == nil && s.profile == "" {
		p, err := onlyProfile(ctx, s.c)
		if err != nil {
			return nil, err
		}
		s.profile = p
	}
	if err := s.follow(); err != nil {
		return nil, err
	}
	return hist, nil
}

// isTerminalOut reports whether w is a terminal (for the spinner).
func isTerminalOut(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// onlyProfile is the profile to use when none is named: the only one there is.
func onlyProfile(ctx context.Context, c *client.Client) (string, error) {
	list, err := c.ListProfiles(ctx)
	if err != nil {
		return "", err
	}
	switch len(list) {
	case 0:
		return "", apierr.Invalid("profile", "no chat profile yet: add one with `mcpbus profiles add <name> --provider … --model …`")
	case 1:
		return list[0].Name, nil
	}
	names := make([]string, len(list))
	for i, p := range list {
		names[i] = p.Name
	}
	return "", apierr.Invalid("profile", "choose a profile with --profile: "+strings.Join(names, ", "))
}

// oneShot sends one message and prints the answer; the exit status says how
// the turn ended.
func (s *chatSession) oneShot(msg string) error {
	done, err := s.send(msg)
	if errors.Is(err, errQuit) {
		return silentExit(130)
	}
	if err != nil {
		return err
	}
	if !s.g.json {
		fmt.Fprintf(s.g.stderr, "conversation %s\n", s.conv)
	}
	switch {
	case done == nil:
		return silentExit(1)
	case done.Reason == model.TurnError:
		if s.r.lastErr != nil || s.g.json {
			return silentExit(1) // the error (or done) event was printed
		}
		return apierr.New(apierr.Internal, "the turn ended in an error: "+done.Message)
	case done.Reason == model.TurnCancelled:
		return silentExit(130)
	}
	return nil
}

// repl is the interactive conversation: a prompt, then the turn, until
// Ctrl-D, /quit or a second Ctrl-C at the prompt.
func (s *chatSession) repl(hist *model.ChatHistoryReply) error {
	out := s.g.stderr
	if hist != nil {
		printRecent(s.g, hist.Entries, 6)
	}
	fmt.Fprintf(out, "conversation %s — continue it later with `mcpbus chat %s`\n", s.conv, s.conv)
	fmt.Fprintln(out, "Ctrl-C cancels a turn, Ctrl-D (or Ctrl-C twice) quits.")
	if err := s.join(hist); err != nil {
		return err
	}
	interrupted := false
	for {
		fmt.Fprint(s.g.stdout, "\n> ")
		select {
		case line, ok := <-s.input.lines():
			if !ok {
				fmt.Fprintln(s.g.stdout)
				return nil
			}
			interrupted = false
			line = strings.TrimSpace(line)
			switch line {
			case "":
				continue
			case "/quit", "/exit":
				return nil
			}
			fmt.Fprintln(s.g.stdout)
			done, err := s.send(line)
			if errors.Is(err, errQuit) {
				return nil
			}
			if err != nil {
				if apierr.Of(err) == apierr.ServiceUnavailable {
					return err
				}
				s.r.note(formatErr(apierr.From(err)))
				continue
			}
			if u := s.r.summary(); u != "" && done != nil {
				fmt.Fprintf(out, "\033[2m%s\033[0m\n", u)
			}
		case sig := <-s.sigs:
			if interrupted || sig == syscall.SIGTERM {
				fmt.Fprintln(s.g.stdout)
				return nil
			}
			interrupted = true
			fmt.Fprint(out, "\n(Ctrl-C again or Ctrl-D to quit)")
		}
	}
}

// join follows the turn of a continued conversation that is still running
// (its approvals asked), so the prompt comes back when it ends.
func (s *chatSession) join(hist *model.ChatHistoryReply) error {
	if hist == nil {
		return nil
	}
	last := hist.Entries[len(hist.Entries)-1]
	if last.Kind == model.EntryTurnEnd {
		return nil
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.g.timeout)
	pending, err := s.c.ChatPending(ctx, s.conv)
	cancel()
	if err != nil {
		return err
	}
	fmt.Fprintln(s.g.stderr, "a turn is running; its answer follows (Ctrl-C cancels it)")
	s.r.beginTurn()
	_, err = s.wait(last.Turn, pending)
	if errors.Is(err, errQuit) {
		return silentExit(130)
	}
	return err
}
