package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
)

// chatSession is one conversation followed by the CLI: its events arrive on
// events from before the first message is sent.
type chatSession struct {
	g       *globals
	c       *client.Client
	ctx     context.Context // not ended by Ctrl-C: signals are handled here
	conv    string
	profile string // sent with the next message (a new conversation, or a switch)
	events  chan model.ChatEvent
	stop    func()
	sigs    chan os.Signal
	input   *lineInput
	r       *renderer
	// turnTimeout bounds one turn; probeEvery is how long without an event
	// before asking whether the chat service is still there.
	turnTimeout, probeEvery time.Duration
}

// errQuit ends the session at the user's request (a second Ctrl-C, SIGTERM).
var errQuit = errors.New("quit")

// follow subscribes to the conversation's events.
func (s *chatSession) follow() error {
	s.events = make(chan model.ChatEvent, 4096)
	quit := make(chan struct{})
	stop, err := s.c.FollowChat(s.conv, func(ev model.ChatEvent) {
		select {
		case s.events <- ev:
		case <-quit:
		}
	})
	if err != nil {
		return err
	}
	s.stop = func() { stop(); close(quit) }
	return nil
}

// send starts a turn with msg and follows it to its end.
func (s *chatSession) send(msg string) (*model.ChatDone, error) {
	s.r.beginTurn()
	ctx, cancel := context.WithTimeout(s.ctx, s.g.timeout)
	reply, err := s.c.ChatSend(ctx, model.ChatSendRequest{Conversation: s.conv, Profile: s.profile, Message: msg})
	cancel()
	if err != nil {
		return nil, err
	}
	s.profile = "" // the conversation keeps it
	return s.wait(reply.Turn, nil)
}

// wait follows turn until its done event, answering approvals from the
// input; pending are calls already awaiting approval (joining a turn).
// Ctrl-C asks the service to cancel the turn; a second one quits.
func (s *chatSession) wait(turn string, pending []model.ChatToolCall) (*model.ChatDone, error) {
	deadline := time.NewTimer(s.turnTimeout)
	defer deadline.Stop()
	probe := time.NewTicker(s.probeEvery)
	defer probe.Stop()
	spin := time.NewTicker(120 * time.Millisecond)
	defer spin.Stop()
	ask := &approvals{s: s}
	for _, tc := range pending {
		ask.add(tc)
	}
	quiet, cancelled := true, false
	for {
		var lines <-chan string
		if ask.waiting() {
			lines = s.input.lines()
		}
		select {
		case ev := <-s.events:
			if ev.Turn != turn {
				continue // an earlier turn's late event, or another client's turn
			}
			quiet = false
			s.r.event(ev)
			if tc := ev.ToolCall; tc != nil {
				if tc.State == model.ToolCallAwaitingApproval {
					ask.add(*tc)
				} else {
					ask.drop(tc.CallID)
				}
			}
			if ev.Kind == model.ChatEventDone {
				return ev.Done, nil
			}
		case line, ok := <-lines:
			if err := ask.answer(line, ok); err != nil {
				s.r.note(formatErr(apierr.From(err)))
			}
		case sig := <-s.sigs:
			if cancelled || sig == syscall.SIGTERM {
				s.cancel(turn)
				return nil, errQuit
			}
			cancelled = true
			s.r.note("cancelling the turn… (Ctrl-C again to quit)")
			if done := s.cancel(turn); done != nil {
				s.r.event(model.ChatEvent{Kind: model.ChatEventDone, Turn: turn, Conversation: s.conv, Done: done})
				return done, nil
			}
		case <-spin.C:
			s.r.tick()
		case <-probe.C:
			if quiet && !ask.waiting() {
				if err := s.probe(); err != nil {
					return nil, err
				}
			}
			quiet = true
		case <-deadline.C:
			s.cancel(turn)
			return nil, apierr.Newf(apierr.Network, "the turn did not end within %s (--turn-timeout): cancelled", s.turnTimeout)
		}
	}
}

// cancel asks the service to end turn; the done it reports, if any.
func (s *chatSession) cancel(turn string) *model.ChatDone {
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	reply, err := s.c.ChatCancel(ctx, model.ChatCancelRequest{Conversation: s.conv, Turn: turn})
	if err != nil {
		s.r.note("cancel: " + formatErr(apierr.From(err)))
		return nil
	}
	return reply.Done
}

// probe checks that the chat service still answers (a turn without events
// for a while: a service gone would otherwise leave us waiting).
func (s *chatSession) probe() error {
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	_, err := s.c.ChatPending(ctx, s.conv)
	if apierr.Of(err) == apierr.ServiceUnavailable {
		return apierr.New(apierr.ServiceUnavailable, "the chat service stopped answering during the turn")
	}
	return nil
}

// approvals are the calls of the turn awaiting an answer, asked one at a time.
type approvals struct {
	s     *chatSession
	queue []model.ChatToolCall
}

func (a *approvals) waiting() bool { return len(a.queue) > 0 }

func (a *approvals) add(tc model.ChatToolCall) {
	for _, q := range a.queue {
		if q.CallID == tc.CallID {
			return
		}
	}
	a.queue = append(a.queue, tc)
	if len(a.queue) == 1 {
		a.prompt()
	}
}

// drop forgets a call that was decided elsewhere (another client, a timeout).
func (a *approvals) drop(callID string) {
	for i, q := range a.queue {
		if q.CallID == callID {
			a.queue = append(a.queue[:i], a.queue[i+1:]...)
			if i == 0 && len(a.queue) > 0 {
				a.prompt()
			}
			return
		}
	}
}

func (a *approvals) prompt() {
	tc := a.queue[0]
	args := strings.TrimSpace(string(tc.Arguments))
	a.s.r.note(fmt.Sprintf("Allow %s %s? [y]es / [n]o / [a]lways in this conversation", tc.Tool, oneLine(args, 200)))
	fmt.Fprint(a.s.g.stderr, "> ")
}

// answer sends the decision a line gives for the first call; no more input
// (ok false) denies it.
func (a *approvals) answer(line string, ok bool) error {
	decision := model.DecisionDeny
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		decision = model.DecisionApprove
	case "a", "always":
		decision = model.DecisionApproveConversation
	case "n", "no":
	default:
		if ok {
			fmt.Fprint(a.s.g.stderr, "answer y, n or a: ")
			return nil
		}
		a.s.r.note("no answer on stdin: denied")
	}
	tc := a.queue[0]
	a.queue = a.queue[1:]
	err := a.decide(model.ChatApproveRequest{Conversation: a.s.conv, CallID: tc.CallID, Decision: decision})
	if len(a.queue) > 0 {
		a.prompt()
	}
	return err
}

// decide sends the decision. The awaiting_approval event may come before
// the service has stored the pending call, so NOT_FOUND is retried briefly.
func (a *approvals) decide(req model.ChatApproveRequest) error {
	ctx, cancel := context.WithTimeout(a.s.ctx, a.s.g.timeout)
	defer cancel()
	var err error
	for wait := 50 * time.Millisecond; wait < 3*time.Second; wait *= 2 {
		if _, err = a.s.c.ChatApprove(ctx, req); apierr.Of(err) != apierr.NotFound {
			return err
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return err
		}
	}
	return err
}
