// Package approvals is the approver of chat tool calls (issue 14) and, the
// same way, of the servers' requests for input (inputs.go). A call the
// profile's rules (model.ApprovalPolicy.EngineRules: rules of the one
// approval engine, libs/approvals) say to ask about is held like any other:
// a record in KV mcp_approvals bound to the turn's sender, the tool and the
// arguments' hash, which `mcpbus approvals`, the REST API and the console
// decide too. The conversation keeps its own view of it in the bucket
// bus.BucketChatApprovals, so its user answers by call id
// (mcp.v1.chat.approve → Decide) and a client that joins lists what waits.
//
// Keys (KV keys allow [-/_=.a-zA-Z0-9], so call ids and tool names are
// encoded):
//
//	<conversation>.pending.<base64url(call_id)>   a call awaiting an answer (its held call's id)
//	<conversation>.granted.<hex sha256(tool)[:32]> an approve_conversation grant
//	<conversation>.input.<input id>              a server's request for input
//
// A decision is written on the held call with compare-and-set on the
// revision the decider read (libs/approvals), so of two answers only one
// wins (the other gets CONFLICT), and a pending call past its expiry is
// denied, whoever reads it.
package approvals

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	engine "github.com/mcpbus/mcpbus/libs/approvals"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
)

// DefaultTimeout is how long Ask waits for an answer.
const DefaultTimeout = 5 * time.Minute

// Options configure an Approver; zero values take the defaults.
type Options struct {
	// Replicas of the bucket (1 embedded, 3 on a cluster).
	Replicas int
	// Timeout bounds the wait of one Ask (default DefaultTimeout, at most
	// model.MaxApprovalTimeout); then the call is denied.
	Timeout time.Duration
	// InputTimeout bounds the wait of one AskInput (default Timeout); then
	// the input is cancelled.
	InputTimeout time.Duration
	// Logger hears what start-up waits for.
	Logger *slog.Logger
	// Now is the clock of asked_at and decided_at (default time.Now).
	Now func() time.Time
}

// Approver implements loop.Approver on the KV bucket; Decide and Pending
// serve mcp.v1.chat.approve and the listing of what waits. It is safe for
// concurrent use, and any number of instances may share the bucket.
type Approver struct {
	kv           jetstream.KeyValue
	held         *engine.Store // the held calls (KV mcp_approvals)
	timeout      time.Duration
	inputTimeout time.Duration
	now          func() time.Time
}

// Record is the value of a pending key.
type Record struct {
	Conversation string          `json:"conversation"`
	CallID       string          `json:"call_id"`
	Tool         string          `json:"tool"`
	Arguments    json.RawMessage `json:"arguments,omitempty"`
	AskedAt      time.Time       `json:"asked_at"`
	// Decision is empty while the call waits.
	Decision  string    `json:"decision,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	DecidedAt time.Time `json:"decided_at,omitzero"`
	// HeldID is the held call in KV mcp_approvals that decides it.
	HeldID string `json:"held_id,omitempty"`
}

// grant is the value of a granted key.
type grant struct {
	Tool      string    `json:"tool"`
	CallID    string    `json:"call_id"`
	GrantedAt time.Time `json:"granted_at"`
}

// Open creates (or opens) the bucket and returns the approver.
func Open(ctx context.Context, nc *nats.Conn, opts Options) (*Approver, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.InputTimeout <= 0 {
		opts.InputTimeout = opts.Timeout
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	kv, err := bus.EnsureKV(ctx, js, jetstream.KeyValueConfig{
		Bucket:      bus.BucketChatApprovals,
		Description: "chat tool calls awaiting approval (<conversation>.pending.*), conversation grants (<conversation>.granted.*) and servers' requests for input (<conversation>.input.*)",
		// The answered value survives the asker's delete, so a late second
		// answer is told CONFLICT rather than NOT_FOUND.
		History: 3,
		Storage: jetstream.FileStorage,
	}, max(opts.Replicas, 1), opts.Logger)
	if err != nil {
		return nil, err
	}
	// The calls are held by the one engine; an approved one the rules also
	// hold on the bus is left for the runner, which consumes it.
	held, err := engine.Open(ctx, ctx, nc, engine.Options{Replicas: opts.Replicas, Logger: opts.Logger, Now: opts.Now, LeaveForBus: true})
	if err != nil {
		return nil, err
	}
	// Approvals and answers are written while a turn waits: ride out a
	// leader election (bus.RetryKV). The answer watch is not retried.
	return &Approver{kv: bus.RetryKV(kv), held: held, timeout: opts.Timeout, inputTimeout: opts.InputTimeout, now: opts.Now}, nil
}

// PendingKey is the key of a call awaiting approval.
func PendingKey(conversation, callID string) string {
	return conversation + ".pending." + base64.RawURLEncoding.EncodeToString([]byte(callID))
}

// GrantKey is the key of the approve_conversation grant of a tool.
func GrantKey(conversation, tool string) string {
	sum := sha256.Sum256([]byte(tool))
	return conversation + ".granted." + hex.EncodeToString(sum[:16])
}

// ErrTimedOut is returned (with model.DecisionDeny) when nobody answered in time.
var ErrTimedOut = errors.New("approval timed out")

// Ask waits for the answer to call. A tool the conversation granted with
// approve_conversation is approved at once. Else the call is held (a record
// in KV mcp_approvals for the principal ctx carries, the turn's sender, else
// the operator) and listed as pending in the conversation until a decision
// arrives (the conversation's user, an admin, `mcpbus approvals`), ctx ends
// (ctx's error) or the timeout passes (model.DecisionDeny with an error
// wrapping ErrTimedOut). The pending key is deleted before Ask returns.
// tool is the called tool as listed (zero: its server is taken from
// call.Tool): the held call keeps the server's own name of it, which rules
// may name (model.ToolNames).
func (a *Approver) Ask(ctx context.Context, conversation string, call model.ChatToolCall, tool model.Tool, asked func()) (string, error) {
	if !model.ValidConversationID(conversation) {
		return model.DecisionDeny, apierr.Invalid("conversation", "conversation must be a slug or a uuid")
	}
	if call.CallID == "" || call.Tool == "" {
		return model.DecisionDeny, apierr.Invalid("call_id", "the call needs an id and a tool")
	}
	if granted, err := a.granted(ctx, conversation, call.Tool); err != nil || granted {
		if err != nil {
			return model.DecisionDeny, err
		}
		return model.DecisionApprove, nil
	}
	who := principal.Operator().ID
	if p, ok := principal.From(ctx); ok {
		who = p.ID
	}
	server := tool.Server
	if server == "" {
		server, _, _ = strings.Cut(call.Tool, "__")
	}
	h, err := a.held.Hold(ctx, engine.Call{Principal: who, Server: server, Tool: call.Tool, ServerTool: tool.Tool,
		Arguments: call.Arguments, Timeout: a.timeout}, nil)
	if err != nil {
		return model.DecisionDeny, err
	}
	key := PendingKey(conversation, call.CallID)
	rec := Record{Conversation: conversation, CallID: call.CallID, Tool: call.Tool, Arguments: call.Arguments, AskedAt: a.now().UTC(), HeldID: h.ID}
	data, err := json.Marshal(rec)
	if err != nil {
		return model.DecisionDeny, err
	}
	// An existing key is the same call asked again (a resumed turn): it
	// names the same held call, since the id binds the same three things.
	if _, err := a.kv.Create(ctx, key, data); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		// A write whose answer did not come (JetStream slow past a try's
		// bound, then ctx ended) may have landed: the key would list a call
		// nobody waits for.
		a.cleanup(key)
		return model.DecisionDeny, err
	}
	if asked != nil {
		asked() // the call is listed as pending before anyone hears of it
	}
	if h.State(a.now()) == model.HeldPending {
		h, err = a.held.Await(ctx, h)
	} else {
		h, err = a.held.Take(ctx, h) // decided before this turn asked
	}
	if err != nil {
		a.cleanup(key)
		if ctx.Err() != nil {
			return model.DecisionDeny, ctx.Err()
		}
		return model.DecisionDeny, err
	}
	decision := model.DecisionDeny
	if h.Decision == model.HeldApproved {
		decision = model.DecisionApprove
		if g, _ := a.granted(context.WithoutCancel(ctx), conversation, call.Tool); g {
			decision = model.DecisionApproveConversation
		}
	}
	a.settle(key, rec, decision, h.Reason)
	if h.Decision != model.HeldApproved && h.DecidedBy == "" {
		return model.DecisionDeny, fmt.Errorf("%w: %s", ErrTimedOut, h.Reason)
	}
	return decision, nil
}

// granted reports whether the conversation granted tool (approve_conversation).
func (a *Approver) granted(ctx context.Context, conversation, tool string) (bool, error) {
	_, err := a.kv.Get(ctx, GrantKey(conversation, tool))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	return err == nil, err
}

// settle records the decision on the pending key, then deletes it: the
// decided value stays in the key's history, so a late answer is told
// CONFLICT rather than NOT_FOUND.
func (a *Approver) settle(key string, rec Record, decision, reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rec.Decision, rec.Reason, rec.DecidedAt = decision, reason, a.now().UTC()
	if data, err := json.Marshal(rec); err == nil {
		_, _ = a.kv.Put(ctx, key, data)
	}
	a.cleanup(key)
}

// errExpired is await's timeout.
var errExpired = errors.New("nobody answered in time")

// await watches a pending key until answered says its value holds the
// answer (returned), ctx ends (ctx's error) or timeout passes (errExpired,
// with the revision last seen for the asker's compare-and-set expiry).
func (a *Approver) await(ctx context.Context, key string, timeout time.Duration, answered func([]byte) (bool, error)) ([]byte, uint64, error) {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	val, rev, err := bus.AwaitKV(wctx, a.kv, key, answered)
	switch {
	case errors.Is(err, bus.ErrKVWithdrawn):
		return nil, rev, errors.New("the pending question was withdrawn")
	case err != nil && ctx.Err() != nil:
		return nil, rev, ctx.Err()
	case err != nil && wctx.Err() != nil:
		return nil, rev, errExpired
	}
	return val, rev, err
}

// cleanup deletes the pending key, trying again when JetStream is slow to
// answer (a left-over key would list a call nobody waits for).
func (a *Approver) cleanup(key string) {
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := a.kv.Delete(ctx, key)
		cancel()
		if err == nil || errors.Is(err, jetstream.ErrKeyNotFound) {
			return
		}
	}
}

// Decide answers a pending call as the principal ctx carries (the
// conversation's user, whom the chat service checked; the operator without
// one): VALIDATION_ERROR for a bad request, NOT_FOUND when no such call
// waits, CONFLICT when it was answered already (or another answer wins the
// race, here or through `mcpbus approvals`). approve_conversation also
// grants the tool for the rest of the conversation.
func (a *Approver) Decide(ctx context.Context, req model.ChatApproveRequest) error {
	if e := req.Validate(); e != nil {
		return e
	}
	key := PendingKey(req.Conversation, req.CallID)
	e, err := a.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		if prev := answeredBefore(ctx, a.kv, key, recordDecision); prev != "" {
			return apierr.Newf(apierr.Conflict, "call %q was answered already (%s)", req.CallID, prev)
		}
		return apierr.Newf(apierr.NotFound, "no call %q awaits approval in conversation %q", req.CallID, req.Conversation)
	}
	if err != nil {
		return err
	}
	var rec Record
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return fmt.Errorf("pending approval: %w", err)
	}
	if rec.Decision != "" {
		return apierr.Newf(apierr.Conflict, "call %q was answered already (%s)", req.CallID, rec.Decision)
	}
	if rec.HeldID == "" {
		// Written before calls were held by the engine: nobody waits on it;
		// the turn asks again when it resumes.
		return apierr.Newf(apierr.NotFound, "no call %q awaits approval in conversation %q", req.CallID, req.Conversation)
	}
	// The grant first: the asker may move on (and ask again) as soon as the
	// decision is written. A grant this answer made is taken back if the
	// engine refuses the answer (another instance's or `mcpbus approvals`'
	// decision, or the timeout, came first; the call is not the asker's to
	// decide): a refused answer must not approve the tool's later calls.
	grantKey := GrantKey(req.Conversation, rec.Tool)
	var g []byte
	var granted uint64 // the revision of the grant this answer made
	if req.Decision == model.DecisionApproveConversation {
		g, _ = json.Marshal(grant{Tool: rec.Tool, CallID: rec.CallID, GrantedAt: a.now().UTC()})
		rev, err := a.kv.Create(ctx, grantKey, g)
		switch {
		case errors.Is(err, jetstream.ErrKeyExists): // granted already: not this answer's to take back
		case err != nil:
			return err
		default:
			granted = rev
		}
	}
	by := principal.Operator()
	if p, ok := principal.From(ctx); ok {
		by = p
	}
	d := model.ApprovalDecideRequest{ID: rec.HeldID, Decision: model.DecisionDeny, Reason: "denied in the conversation"}
	if req.Decision != model.DecisionDeny {
		d.Decision, d.Reason = model.DecisionApprove, "approved in the conversation"
	}
	// The chat checked that by may act in the conversation; the engine
	// checks that it is the call's own principal (or an admin).
	if _, err = a.held.Decide(ctx, d, by.ID, by.Admin, true); err != nil {
		if granted != 0 {
			// Only at this answer's revision: a concurrent approve_conversation
			// that won has written the grant again (below).
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if derr := a.kv.Delete(dctx, grantKey, jetstream.LastRevision(granted)); derr != nil && !errors.Is(derr, jetstream.ErrKeyRevisionMismatch) {
				// Not the refusal's code: the caller must learn that the
				// grant it did not get is in force.
				err = apierr.Wrap(apierr.ServiceUnavailable, fmt.Sprintf("%s; taking back the grant of %s for the conversation failed", apierr.From(err).Message, rec.Tool), derr)
			}
			cancel()
		}
		return err
	}
	if g != nil && granted == 0 {
		// Another answer's grant was there: one refused meanwhile takes it
		// back, so this, the winning one, writes it again.
		if _, err := a.kv.Put(ctx, grantKey, g); err != nil {
			return err
		}
	}
	return nil
}

// recordDecision is what a pending call was answered with.
func recordDecision(r *Record) string { return r.Decision }

// Pending lists the calls of a conversation awaiting approval, oldest first.
func (a *Approver) Pending(ctx context.Context, conversation string) ([]model.ChatToolCall, error) {
	if e := (&model.ChatConversationRef{Conversation: conversation}).Validate(); e != nil {
		return nil, e
	}
	recs, err := unanswered(ctx, a.kv, conversation+".pending.*", recordDecision)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(recs, func(x, y Record) int { return x.AskedAt.Compare(y.AskedAt) })
	out := make([]model.ChatToolCall, 0, len(recs))
	for _, r := range recs {
		out = append(out, model.ChatToolCall{CallID: r.CallID, Tool: r.Tool, State: model.ToolCallAwaitingApproval, Arguments: r.Arguments})
	}
	return out, nil
}

// Forget purges every pending call and grant of a conversation (when it is deleted).
func (a *Approver) Forget(ctx context.Context, conversation string) error {
	if e := (&model.ChatConversationRef{Conversation: conversation}).Validate(); e != nil {
		return e
	}
	lister, err := a.kv.ListKeysFiltered(ctx, conversation+".>")
	if err != nil {
		return err
	}
	for key := range lister.Keys() {
		if err := a.kv.Purge(ctx, key); err != nil {
			return err
		}
	}
	return nil
}
