// Package loop is the engine of one chat turn: the user's message, then model
// steps and the tool calls they ask for, until a final answer, max steps, the
// budget, a guard or cancellation ends it.
//
// The loop is event-sourced: everything it does is an entry of the
// conversation log (user_message, model_step, approval, tool_result,
// turn_end) and its state is derived from the log's entries alone. So another
// instance can Resume a turn left unfinished by a crash: calls of the last
// model step that have a result are never run again, the missing ones are,
// except calls started as durable tasks (tasks.go): their task is waited for.
// A turn reads the log once (Begin, Resume) and keeps the entries in memory,
// adding its own appends. Every append claims the slot right after the entry
// the turn knows as the last (optimistic concurrency on the stream sequence),
// so the log cannot move away from the turn's copy unnoticed: when another
// instance wrote meanwhile the loop stops with the log's CONFLICT error and
// writes nothing more.
package loop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
	"github.com/mcpbus/mcpbus/libs/toolsearch"
	"github.com/mcpbus/mcpbus/services/chat/conversation"
	"github.com/mcpbus/mcpbus/services/chat/provider"
)

// ToolCaller reaches the MCP tools: the live catalog and calls by server and
// original tool name. ClientTools adapts a *client.Client.
type ToolCaller interface {
	List(ctx context.Context) ([]model.Tool, error)
	// Call returns the raw CallToolResult JSON.
	Call(ctx context.Context, server, tool string, args json.RawMessage) (json.RawMessage, error)
}

// Approver answers the tool calls a profile's approval policy says to ask
// for: model.DecisionApprove, DecisionApproveConversation or DecisionDeny
// (services/chat/approvals.Approver, on KV).
type Approver interface {
	// Ask calls asked once the call is recorded as pending (not when it
	// is decided at once), so the awaiting_approval event follows the record.
	// tool is the called tool as the catalog lists it (its server and its
	// own name).
	Ask(ctx context.Context, conversation string, call model.ChatToolCall, tool model.Tool, asked func()) (decision string, err error)
}

// InputAsker puts a tool call's server's request for input to the
// conversation's user and waits for the answer; approvals.Approver
// implements it on the KV bucket.
type InputAsker interface {
	// AskInput calls asked once the input is recorded as pending; the
	// answer is the input with its Action (and Reason when the asker
	// answered it itself, a timeout) and the accepted content.
	AskInput(ctx context.Context, conversation string, in model.ChatInput, asked func(model.ChatInput)) (model.ChatInput, map[string]any, error)
}

// ErrHandOff, as the cause of the cancellation of a turn's context, stops
// the turn where it is without ending it (no turn_end): its instance stops
// or lost the conversation, and another instance resumes the turn.
var ErrHandOff = errors.New("the turn is handed over to another instance")

// ResultStore keeps the full text of cut tool results by conversation and
// call id; results.Store implements it.
type ResultStore interface {
	Put(ctx context.Context, conversation, callID, text string) error
	// Get returns NOT_FOUND (apierr) when the call has no stored result.
	Get(ctx context.Context, conversation, callID string) (string, error)
}

// Defaults of Deps.
const (
	DefaultCallTimeout = 30 * time.Second
	// DefaultStepTimeout bounds one model step (the CLI's --turn-timeout
	// would have cancelled the turn by then).
	DefaultStepTimeout  = 30 * time.Minute
	DefaultResultBudget = 16 << 10
	// DefaultKeepLimit bounds the full text of a cut result kept in its log
	// entry (a JetStream message is at most 1 MiB by default).
	DefaultKeepLimit = 512 << 10
	// DefaultStoreLimit bounds the full text of a cut result kept in
	// Deps.Results: generous, but a tool gone wild must not fill the store.
	DefaultStoreLimit = 8 << 20
	// ReadResultTool is the built-in tool that reads a cut result.
	ReadResultTool = "read_result"
)

// Deps are what an Engine works with.
type Deps struct {
	Log   *conversation.Log
	Tools ToolCaller
	// Model returns the model of a profile (provider.New with its key).
	Model func(model.Profile) (provider.Model, error)
	// Publish receives the turn's events (nil: none); it is called from
	// several goroutines at once (parallel tool calls).
	Publish func(model.ChatEvent)
	// Approver answers "ask" decisions; nil denies them with a clear message.
	Approver Approver
	// Inputs puts the servers' requests for input to the user; nil declines
	// them.
	Inputs InputAsker
	// CallTimeout bounds one tool call (default 30 s).
	CallTimeout time.Duration
	// StepTimeout bounds one model step, the provider's retries included
	// (default DefaultStepTimeout): a provider that stops sending, or never
	// ends its stream, must not hold the turn (and its conversation) for
	// ever when the profile has no max_turn_duration.
	StepTimeout time.Duration
	// ResultBudget is the bytes of a tool result the model sees; larger ones
	// are cut head+tail and readable through read_result (default 16 KiB).
	ResultBudget int
	// KeepLimit bounds the full result kept for read_result in the log
	// entry (default 512 KiB).
	KeepLimit int
	// Results keeps the full text of cut results instead of their log
	// entries (results.Store on the JetStream Object Store); nil: the log
	// entries keep them, up to KeepLimit.
	Results ResultStore
	// StoreLimit bounds the full result kept in Results (default 8 MiB).
	StoreLimit int
	// TaskTools are globs of the namespaced tools whose calls run as
	// durable tasks (when Tools is a TaskRunner): such a call survives the
	// instance's death and is never run twice by a resumed turn, but its
	// server cannot put requests to the user, and TaskTimeout bounds it
	// instead of CallTimeout. Nil: none.
	TaskTools []string
	// TaskTimeout bounds the wait for a task's outcome (default 1 h).
	TaskTimeout time.Duration
	// RepeatLimit ends the turn at the RepeatLimit-th identical call (default 3).
	RepeatLimit int
	// BreakerLimit stops calls to a server after that many consecutive
	// failures in the turn (default 3).
	BreakerLimit int
	Logger       *slog.Logger
	Now          func() time.Time
}

// Engine runs turns. It holds no conversation state: the log does.
type Engine struct {
	d   Deps
	tel instruments
	// search indexes the whole catalog for search_tools (search.go); seed
	// hashes its servers' stamps.
	search *toolsearch.Index
	seed   maphash.Seed
}

// New returns an engine with d's defaults filled.
func New(d Deps) *Engine {
	if d.CallTimeout <= 0 {
		d.CallTimeout = DefaultCallTimeout
	}
	if d.TaskTimeout <= 0 {
		d.TaskTimeout = DefaultTaskTimeout
	}
	if d.StepTimeout <= 0 {
		d.StepTimeout = DefaultStepTimeout
	}
	if d.ResultBudget <= 0 {
		d.ResultBudget = DefaultResultBudget
	}
	if d.KeepLimit <= 0 {
		d.KeepLimit = DefaultKeepLimit
	}
	if d.StoreLimit <= 0 {
		d.StoreLimit = DefaultStoreLimit
	}
	if d.RepeatLimit < 2 {
		d.RepeatLimit = 3
	}
	if d.BreakerLimit < 1 {
		d.BreakerLimit = 3
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Publish == nil {
		d.Publish = func(model.ChatEvent) {}
	}
	return &Engine{d: d, tel: newInstruments(), search: toolsearch.New(), seed: maphash.MakeSeed()}
}

// turn is one run of the loop on one conversation.
type turn struct {
	e       *Engine
	conv    string
	id      string
	profile model.Profile
	model   provider.Model
	// mu serialises appends. entries are the conversation's log as the turn
	// knows it, up to tail: read once (Begin, Resume), then extended by the
	// turn's own appends, each conditional on tail being the log's end.
	mu      sync.Mutex
	entries []model.ChatEntry
	tail    conversation.Tail
	// decoded are the entries' payloads, decoded once.
	decoded payloads
	// failure is error.type of the model error that ended the turn.
	failure string
	// noInput: the turn's sender has no user to ask (elicitations declined).
	noInput bool
	// noTools: the turn offers the model no tool and runs none.
	noTools bool
	// sender sent the turn's message (nil: the operator).
	sender *principal.Principal
	// offered is the catalog (by name) the last model step was offered,
	// for runCalls to resolve that step's calls without listing it again.
	offered map[string]model.Tool
	// sampling admits one server sampling request of the turn at a time;
	// sampled are the tokens they used (counted against the budget, not
	// logged: a turn resumed elsewhere starts them from zero).
	sampling gate
	sampled  atomic.Int64
}

// Turn is a turn begun by Begin, to be driven to its end by Drive.
type Turn struct{ t *turn }

// ID is the turn's id (the turn field of its entries and events).
func (t *Turn) ID() string { return t.t.id }

// Drive runs the turn to its end; see RunTurn for the errors.
func (t *Turn) Drive(ctx context.Context) (model.ChatDone, error) { return t.t.drive(ctx) }

// RunTurn appends the user's message as a new turn and runs the turn to its
// end. The error is for what stops the loop without a turn_end: the log
// (CONFLICT when another instance appended first) or a profile whose model
// cannot be made; model errors end the turn with reason error.
func (e *Engine) RunTurn(ctx context.Context, conv string, profile model.Profile, userMessage string) (model.ChatDone, error) {
	t, err := e.Begin(ctx, conv, profile, userMessage, BeginOptions{})
	if err != nil {
		return model.ChatDone{}, err
	}
	return t.Drive(ctx)
}

// BeginOptions are what a send may add to its message.
type BeginOptions struct {
	// Context are messages before it (only a new conversation takes them).
	Context []model.ChatContextMessage
	// NoInput: the sender has no user to put a server's questions to.
	NoInput bool
	// NoTools: the turn may use no tool (OpenAI's tool_choice "none").
	NoTools bool
	// Sender is who sent the message: its tool filter narrows the
	// profile's (the model is offered only tools both allow) and its tool
	// calls go on the bus in its name. Nil: the operator, every tool.
	Sender *principal.Principal
}

// Begin appends the user's message as a new turn (after the context
// messages, which only a new conversation takes) and returns the turn
// without running it.
func (e *Engine) Begin(ctx context.Context, conv string, profile model.Profile, userMessage string, opts BeginOptions) (*Turn, error) {
	context := opts.Context
	if strings.TrimSpace(userMessage) == "" {
		return nil, apierr.Invalid("message", "message is empty")
	}
	if len(userMessage) > model.MaxChatMessage {
		return nil, apierr.Invalid("message", fmt.Sprintf("message is longer than %d bytes", model.MaxChatMessage))
	}
	m, err := e.d.Model(profile)
	if err != nil {
		return nil, err
	}
	entries, tail, err := e.d.Log.ReadTail(ctx, conv)
	if err != nil && apierr.Of(err) != apierr.NotFound {
		return nil, err
	}
	if len(context) > 0 && len(entries) > 0 {
		return nil, apierr.Invalid("context", "only a new conversation takes context messages")
	}
	t := &turn{e: e, conv: conv, id: uuid.NewString(), profile: profile, model: m, entries: entries, tail: tail, noInput: opts.NoInput,
		noTools: opts.NoTools, sender: opts.Sender}
	if len(context) > 0 {
		// The context is a turn of its own, before the new one.
		ct := &turn{e: e, conv: conv, id: uuid.NewString(), entries: t.entries, tail: t.tail}
		for _, c := range context {
			var err error
			switch c.Role {
			case model.ChatRoleSystem:
				err = ct.append(ctx, model.EntryInstructions, Instructions{Text: c.Content})
			case model.ChatRoleAssistant:
				err = ct.append(ctx, model.EntryModelStep, ModelStep{Text: c.Content})
			default:
				err = ct.append(ctx, model.EntryUserMessage, UserMessage{Text: c.Content})
			}
			if err != nil {
				return nil, plain(err)
			}
		}
		t.entries, t.tail = ct.entries, ct.tail
	}
	if err := t.append(ctx, model.EntryUserMessage, UserMessage{Text: userMessage, Profile: profile.Name, NoInput: opts.NoInput, NoTools: opts.NoTools, Sender: opts.Sender}); err != nil {
		return nil, plain(err)
	}
	return &Turn{t: t}, nil
}

// lastNoInput is the NoInput of the conversation's last user message.
func lastNoInput(entries []model.ChatEntry) bool {
	u, ok := lastUserMessage(entries)
	return ok && u.NoInput
}

// lastNoTools is the NoTools of the conversation's last user message.
func lastNoTools(entries []model.ChatEntry) bool {
	u, ok := lastUserMessage(entries)
	return ok && u.NoTools
}

// lastUserMessage decodes the conversation's last user message.
func lastUserMessage(entries []model.ChatEntry) (UserMessage, bool) {
	for i := len(entries) - 1; i >= 0; i-- {
		if entries[i].Kind != model.EntryUserMessage {
			continue
		}
		var u UserMessage
		return u, json.Unmarshal(entries[i].Payload, &u) == nil
	}
	return UserMessage{}, false
}

// lastSender is the Sender of the conversation's last user message (nil:
// the operator, or a message logged before senders were).
func lastSender(entries []model.ChatEntry) *principal.Principal {
	for i := len(entries) - 1; i >= 0; i-- {
		if entries[i].Kind != model.EntryUserMessage {
			continue
		}
		var u UserMessage
		if json.Unmarshal(entries[i].Payload, &u) == nil && u.Profile != "" {
			return u.Sender
		}
	}
	return nil
}

// LastProfile is the profile name of the conversation's last user message
// ("" when it has none): the profile a message without one continues with,
// and the one a resumed turn runs with.
func LastProfile(entries []model.ChatEntry) string {
	for i := len(entries) - 1; i >= 0; i-- {
		if entries[i].Kind != model.EntryUserMessage {
			continue
		}
		var u UserMessage
		if json.Unmarshal(entries[i].Payload, &u) == nil && u.Profile != "" {
			return u.Profile
		}
	}
	return ""
}

// Resume continues the conversation's last turn when it has no turn_end (it
// returns that turn's ChatDone when it has one). Calls of the last model step
// that have a result are not run again.
func (e *Engine) Resume(ctx context.Context, conv string, profile model.Profile) (model.ChatDone, error) {
	entries, tail, err := e.d.Log.ReadTail(ctx, conv)
	if err != nil {
		return model.ChatDone{}, err
	}
	s := derive(entries, nil, e.d.RepeatLimit, e.d.BreakerLimit)
	if s.ended {
		return s.done, nil
	}
	m, err := e.d.Model(profile)
	if err != nil {
		return model.ChatDone{}, err
	}
	t := &turn{e: e, conv: conv, id: s.turn, profile: profile, model: m, entries: entries, tail: tail, decoded: *s.decoded,
		noInput: lastNoInput(entries), noTools: lastNoTools(entries), sender: lastSender(entries)}
	return t.drive(ctx)
}

// drive runs the turn from the state in its entries until it ends, in the
// span of the agent's invocation.
func (t *turn) drive(ctx context.Context) (model.ChatDone, error) {
	if t.sender != nil {
		ctx = principal.With(ctx, *t.sender)
	}
	ctx, op := t.startAgent(ctx)
	done, err := t.run(ctx)
	t.endAgent(ctx, op, done, err)
	return done, err
}

// run is drive's loop.
func (t *turn) run(parent context.Context) (model.ChatDone, error) {
	ctx := parent
	s := t.state()
	if d := time.Duration(t.profile.MaxTurnDuration); d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(parent, s.start.Add(d))
		defer cancel()
	}
	maxSteps := t.profile.MaxSteps
	if maxSteps <= 0 {
		maxSteps = model.DefaultChatMaxSteps
	}
	for {
		if s.ended {
			return s.done, nil
		}
		if parent.Err() != nil {
			if errors.Is(context.Cause(parent), ErrHandOff) {
				return model.ChatDone{}, ErrHandOff
			}
			return t.end(parent, model.ChatDone{Reason: model.TurnCancelled, Message: "The turn was cancelled.", Steps: s.steps})
		}
		if ctx.Err() != nil {
			return t.end(parent, t.timeBudget(s))
		}
		switch {
		case s.last != nil && len(s.last.ToolCalls) == 0:
			return t.end(parent, model.ChatDone{Reason: model.TurnFinal, Message: s.last.Text, Steps: s.steps, StopReason: s.last.StopReason})
		case s.repeated != nil:
			return t.end(parent, model.ChatDone{Reason: model.TurnRepeated, Steps: s.steps, Message: fmt.Sprintf(
				"Stopped: the model called %s with the same arguments %d times in this turn, which looks like a loop. Rephrase the request or change the approach.",
				s.repeated.Name, t.e.d.RepeatLimit)})
		case t.profile.MaxTokensPerTurn > 0 && s.tokens+t.sampled.Load() >= t.profile.MaxTokensPerTurn:
			return t.end(parent, model.ChatDone{Reason: model.TurnBudget, Steps: s.steps, Message: fmt.Sprintf(
				"Stopped: this turn used %d tokens, the profile's budget is %d tokens per turn. Send another message to continue.",
				s.tokens+t.sampled.Load(), t.profile.MaxTokensPerTurn)})
		case len(s.pending) > 0:
			if err := t.runCalls(ctx, s); err != nil {
				if !isLogError(err) && (parent.Err() != nil || ctx.Err() != nil) {
					continue // the checks at the top end the turn
				}
				return model.ChatDone{}, plain(err)
			}
		case s.steps >= maxSteps:
			return t.end(parent, model.ChatDone{Reason: model.TurnMaxSteps, Steps: s.steps, Message: fmt.Sprintf(
				"Stopped after %d model steps (the profile's max_steps) without a final answer. Send another message to continue.", s.steps)})
		default:
			if err := t.step(ctx, s); err != nil {
				if parent.Err() != nil || ctx.Err() != nil {
					continue
				}
				if isLogError(err) {
					return model.ChatDone{}, plain(err)
				}
				ae := apierr.From(err)
				t.failure = string(ae.Code)
				t.publish(model.ChatEvent{Kind: model.ChatEventError, Error: ae})
				return t.end(parent, model.ChatDone{Reason: model.TurnError, Message: ae.Message, Steps: s.steps})
			}
		}
		s = t.state()
	}
}

// state derives the turn's state from its entries. No need to read the log
// again: an append that the turn's copy would miss cannot succeed.
func (t *turn) state() *state {
	t.mu.Lock()
	defer t.mu.Unlock()
	return derive(t.entries, &t.decoded, t.e.d.RepeatLimit, t.e.d.BreakerLimit)
}

func (t *turn) timeBudget(s *state) model.ChatDone {
	return model.ChatDone{Reason: model.TurnBudget, Steps: s.steps, Message: fmt.Sprintf(
		"Stopped: this turn reached the profile's time budget of %s. Send another message to continue.",
		time.Duration(t.profile.MaxTurnDuration))}
}

// logError marks the failures of appends (CONFLICT among them).
type logError struct{ err error }

func (e *logError) Error() string { return e.err.Error() }
func (e *logError) Unwrap() error { return e.err }

// plain is the log's own error of a logError.
func plain(err error) error {
	var le *logError
	if errors.As(err, &le) {
		return le.err
	}
	return err
}

func isLogError(err error) bool {
	var le *logError
	return errors.As(err, &le)
}

// append claims the slot after the turn's last known entry for an entry of
// the turn. A failure leaves the tail where it was: should the entry have
// been written nonetheless (an ack lost), the next append is a CONFLICT.
func (t *turn) append(ctx context.Context, kind string, payload any) error {
	data, err := json.Marshal(payload)
	if err != nil {
		return apierr.Wrap(apierr.Internal, "encoding a conversation entry", err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	got, tail, err := t.e.d.Log.AppendAfter(ctx, t.conv, t.tail, model.ChatEntry{Kind: kind, Turn: t.id, Payload: data, At: t.e.d.Now()})
	if err != nil {
		return &logError{err: err}
	}
	t.entries = append(t.entries, got)
	t.tail = tail
	return nil
}

// end appends the turn_end (even when ctx is cancelled) and publishes done.
func (t *turn) end(ctx context.Context, done model.ChatDone) (model.ChatDone, error) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := t.append(actx, model.EntryTurnEnd, done); err != nil {
		return done, plain(err)
	}
	t.publish(model.ChatEvent{Kind: model.ChatEventDone, Done: &done})
	return done, nil
}

func (t *turn) publish(ev model.ChatEvent) {
	ev.Conversation, ev.Turn = t.conv, t.id
	if ev.At.IsZero() {
		ev.At = t.e.d.Now().UTC()
	}
	t.e.d.Publish(ev)
}

// step asks the model for the next step and appends it.
func (t *turn) step(ctx context.Context, s *state) error {
	req := provider.Request{System: t.profile.SystemPrompt, Messages: s.messages()}
	var byName map[string]model.Tool
	if !t.noTools {
		var tools []model.Tool
		tools, byName = t.catalog(ctx)
		if len(tools) > t.budget() {
			req.Tools = append(req.Tools, searchToolsSpec)
			tools = t.foundTools(s, byName)
		}
		for _, tl := range tools {
			req.Tools = append(req.Tools, provider.ToolSpec{Name: tl.Name, Description: tl.Description, InputSchema: tl.InputSchema})
		}
		if s.anyCut {
			req.Tools = append(req.Tools, readResultSpec)
		}
	}
	if s.instructions != "" {
		req.System = strings.TrimSpace(req.System + "\n\n" + s.instructions)
	}
	sctx, cancel := context.WithTimeoutCause(ctx, t.e.d.StepTimeout, errStepTimeout)
	defer cancel()
	sctx, op := t.startChat(sctx, req)
	// While the provider waits out a rate limit the user hears why.
	sctx = provider.WithRetryNotice(sctx, func(e *apierr.Error, retryAfter int) {
		t.publish(model.ChatEvent{Kind: model.ChatEventError, Error: e, RetryAfter: retryAfter})
	})
	reply, err := t.model.Step(sctx, req, func(d provider.Delta) {
		t.publish(model.ChatEvent{Kind: model.ChatEventTextDelta, Text: d.Text})
	})
	t.endChat(sctx, op, reply, err)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(sctx), errStepTimeout) {
		return apierr.Wrap(apierr.Network, fmt.Sprintf("The model did not finish its step within %s; the turn was stopped.", t.e.d.StepTimeout), err)
	}
	if err != nil {
		return err
	}
	n := s.steps + 1
	ms := ModelStep{Step: n, Text: reply.Text, StopReason: string(reply.StopReason),
		Usage: StepUsage{InputTokens: tokens(reply.Usage.InputTokens), OutputTokens: tokens(reply.Usage.OutputTokens)}}
	calls := reply.ToolCalls
	if t.noTools {
		// A model may call a tool it was not offered (one named in the
		// context, or made up): without tools the step is its answer, as
		// OpenAI's tool_choice "none" gives, and nothing runs.
		calls = nil
	} else if len(calls) == 0 && t.profile.TextToolCalls {
		if tc := provider.TextToolCalls(reply.Text); len(tc) > 0 {
			calls, ms.FromText = tc, true
		}
	}
	if len(calls) > provider.MaxToolCalls {
		// The provider bounds structured calls; calls written as text are
		// found here (a 1 MiB answer holds tens of thousands).
		return apierr.Newf(apierr.Internal, "The model asked for %d tool calls in one step, more than %d; the turn was stopped.", len(calls), provider.MaxToolCalls)
	}
	used := s.callIDs()
	for i, c := range calls {
		id := c.ID
		// The id is the model's to choose, but the loop keys a call's
		// approval, result and stored text by it: one it gave already in
		// the conversation (or twice in this step) would take another
		// call's approval or result, so it gets an id of the loop's own.
		for k := 0; !usableCallID(id) || used[id]; k++ {
			id = fmt.Sprintf("call_%d_%d_%s", n, i, t.id[:8])
			if k > 0 {
				id += fmt.Sprintf("_%d", k)
			}
		}
		used[id] = true
		ms.ToolCalls = append(ms.ToolCalls, StepCall{ID: id, Name: c.Name, Arguments: c.Arguments})
	}
	if err := t.append(ctx, model.EntryModelStep, ms); err != nil {
		return err
	}
	t.offered = byName
	u := &model.ChatUsage{Step: n, InputTokens: ms.Usage.InputTokens, OutputTokens: ms.Usage.OutputTokens}
	if p := t.profile.Prices; p != nil {
		c := p.Cost(u.InputTokens, u.OutputTokens)
		u.Cost, u.Currency = &c, p.Currency
	}
	t.publish(model.ChatEvent{Kind: model.ChatEventUsage, Usage: u})
	return nil
}

// errStepTimeout is the cause of a step's end at Deps.StepTimeout.
var errStepTimeout = errors.New("model step timeout")

// maxStepTokens bounds the tokens one step counts, far above any model's
// context: the sum over a turn's steps cannot overflow.
const maxStepTokens = 1 << 32

// tokens is a provider's token count as the budget takes it: a negative one
// (a broken or hostile server) would lift the turn's budget, a huge one
// overflow the sum.
func tokens(n int64) int64 { return min(max(n, 0), maxStepTokens) }

// catalog is the live catalog filtered by the profile and by the sender's
// own filter (both must allow a tool), by namespaced name (tools of two
// servers that share one get names of their own: distinctNames). A call of a tool
// not in it is refused as unknown (runCall), so the sender's filter holds
// for the calls too. Above the tool budget it also indexes the catalog for
// search_tools.
func (t *turn) catalog(ctx context.Context) ([]model.Tool, map[string]model.Tool) {
	all, err := t.e.d.Tools.List(ctx)
	if err != nil {
		t.e.d.Logger.Warn("chat: listing tools failed; offering none this step", "conversation", t.conv, "err", err)
	}
	all = distinctNames(all)
	var out []model.Tool
	byName := map[string]model.Tool{}
	for _, tl := range all {
		names := model.ToolNames(tl.Name, tl.Server, tl.Tool)
		if tl.Name == "" || !t.profile.ToolFilter.Allows(names...) || (t.sender != nil && !t.sender.AllowsTool(names...)) {
			continue
		}
		if _, dup := byName[tl.Name]; dup {
			continue
		}
		byName[tl.Name] = tl
		out = append(out, tl)
	}
	if len(out) > t.budget() {
		t.e.indexCatalog(all) // search mode: search_tools reads the index
	}
	return out, byName
}
