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
	// before asking whether the chat service is still there, probeTimeout
	// how long that question waits for its answer.
	turnTimeout, probeEvery, probeTimeout time.Duration
}

// probeMisses is how many probes in a row may go unanswered before the chat
// service counts as gone: one miss may be a bus reconnecting.
const probeMisses = 3

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
	return s.wait(reply.Turn, model.ChatPendingReply{})
}

// wait follows turn until its done event, answering approvals and the
// servers' requests for input from the input; pending is what already
// waits (joining a turn). Ctrl-C asks the service to cancel the turn; a
// second one quits.
func (s *chatSession) wait(turn string, pending model.ChatPendingReply) (*model.ChatDone, error) {
	deadline := time.NewTimer(s.turnTimeout)
	defer deadline.Stop()
	probe := time.NewTicker(s.probeEvery)
	defer probe.Stop()
	spin := time.NewTicker(120 * time.Millisecond)
	defer spin.Stop()
	ask := &approvals{s: s}
	for _, tc := range pending.Calls {
		ask.add(tc)
	}
	for _, in := range pending.Inputs {
		ask.addInput(in)
	}
	quiet, cancelled := true, false
	missed := 0 // probes in a row that got no answer
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
			quiet, missed = false, 0
			s.r.event(ev)
			if tc := ev.ToolCall; tc != nil {
				if tc.State == model.ToolCallAwaitingApproval {
					ask.add(*tc)
				} else {
					ask.drop(tc.CallID)
				}
			}
			if in := ev.Input; in != nil {
				if ev.Kind == model.ChatEventInputRequested {
					ask.addInput(*in)
				} else {
					ask.dropInput(in.InputID)
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
				if err := s.probe(&missed); err != nil {
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
// for a while: a service gone would otherwise leave us waiting up to
// --turn-timeout). A live service answers at once, even while the model
// thinks; no answer within probeTimeout (a service subscribed but stuck, a
// bus that does not come back) is a miss, and probeMisses in a row end the
// wait. missed counts them across calls.
func (s *chatSession) probe(missed *int) error {
	ctx, cancel := context.WithTimeout(s.ctx, s.probeTimeout)
	defer cancel()
	_, err := s.c.ChatPending(ctx, s.conv)
	switch apierr.Of(err) {
	case apierr.ServiceUnavailable:
		return apierr.New(apierr.ServiceUnavailable, "the chat service stopped answering during the turn")
	case apierr.Network:
		if *missed++; *missed >= probeMisses {
			return apierr.Newf(apierr.ServiceUnavailable, "the chat service stopped answering during the turn: "+
				"%d checks in a row got no answer within %s (the service is stuck or the bus is unreachable); "+
				"the turn may still end: see mcpbus chat history %s", *missed, s.probeTimeout, s.conv)
		}
		return nil
	}
	*missed = 0
	return nil
}

// approvals are what the turn waits for the user on, asked one at a time:
// calls awaiting approval and the servers' requests for input (forms,
// chat_form.go).
type approvals struct {
	s     *chatSession
	queue []question
}

// question is a call to approve (call) or a form to fill in (form).
type question struct {
	call *model.ChatToolCall
	form *formPrompt
}

func (q question) id() string {
	if q.call != nil {
		return q.call.CallID
	}
	return q.form.in.InputID
}

func (a *approvals) waiting() bool { return len(a.queue) > 0 }

func (a *approvals) add(tc model.ChatToolCall) { a.push(question{call: &tc}) }

func (a *approvals) addInput(in model.ChatInput) {
	f, err := newFormPrompt(a.s, in)
	if err != nil {
		a.s.r.note(err.Error())
		return
	}
	a.push(question{form: f})
}

func (a *approvals) push(q question) {
	for _, have := range a.queue {
		if have.id() == q.id() {
			return
		}
	}
	a.queue = append(a.queue, q)
	if len(a.queue) == 1 {
		a.prompt()
	}
}

// drop forgets a call that was decided elsewhere (another client, a timeout).
func (a *approvals) drop(callID string) { a.remove(callID, false) }

// dropInput forgets an input answered elsewhere or timed out.
func (a *approvals) dropInput(inputID string) { a.remove(inputID, true) }

func (a *approvals) remove(id string, input bool) {
	for i, q := range a.queue {
		if q.id() == id && (q.form != nil) == input {
			a.queue = append(a.queue[:i], a.queue[i+1:]...)
			if i == 0 && len(a.queue) > 0 {
				a.prompt()
			}
			return
		}
	}
}

func (a *approvals) prompt() {
	q := a.queue[0]
	if q.form != nil {
		q.form.start()
		return
	}
	tc := q.call
	args := strings.TrimSpace(string(tc.Arguments))
	a.s.r.note(fmt.Sprintf("Allow %s %s? [y]es / [n]o / [a]lways in this conversation", tc.Tool, oneLine(args, 200)))
	fmt.Fprint(a.s.g.stderr, "> ")
}

// answer takes a line for the first question; no more input (ok false)
// denies a call and cancels a form.
func (a *approvals) answer(line string, ok bool) error {
	if f := a.queue[0].form; f != nil {
		if !f.line(line, ok) {
			return nil // the form asks on
		}
		a.queue = a.queue[1:]
		err := f.send()
		if len(a.queue) > 0 {
			a.prompt()
		}
		return err
	}
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
	tc := a.queue[0].call
	a.queue = a.queue[1:]
	err := retryNotFound(a.s, func(ctx context.Context) error {
		_, err := a.s.c.ChatApprove(ctx, model.ChatApproveRequest{Conversation: a.s.conv, CallID: tc.CallID, Decision: decision})
		return err
	})
	if len(a.queue) > 0 {
		a.prompt()
	}
	return err
}

// retryNotFound sends an answer. The event asking it may come before the
// service has stored what waits, so NOT_FOUND is retried briefly.
func retryNotFound(s *chatSession, send func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(s.ctx, s.g.timeout)
	defer cancel()
	var err error
	for wait := 50 * time.Millisecond; wait < 3*time.Second; wait *= 2 {
		if err = send(ctx); apierr.Of(err) != apierr.NotFound {
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
