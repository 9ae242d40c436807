package approvals

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/elicitform"
	"github.com/mcpbus/mcpbus/libs/model"
)

// Inputs: a tool call's server asking the user for input (form
// elicitation) waits in the same bucket as the calls awaiting approval,
// under <conversation>.input.<input id>, and is answered the same way:
// compare-and-set on the revision read, so of an answer and the timeout
// (or two answers) only one wins.

// inputMargin is how long before the tool call's own deadline an input
// still unanswered is cancelled, so the server hears "cancel" rather than
// its call timing out.
const inputMargin = time.Second

// InputKey is the key of an input awaiting an answer.
func InputKey(conversation, inputID string) string {
	return conversation + ".input." + inputID
}

// InputRecord is the value of an input key: the question and, once
// answered, the answer.
type InputRecord struct {
	model.ChatInput
	Content    map[string]any `json:"content,omitempty"`
	AnsweredAt time.Time      `json:"answered_at,omitzero"`
}

// AskInput records in as pending, calls asked with it (ExpiresAt set) and
// waits for the answer: the user's (Answer), or cancel with a Reason when
// nobody answered within the input timeout or before ctx's deadline (less
// a margin). The key is deleted before AskInput returns.
func (a *Approver) AskInput(ctx context.Context, conversation string, in model.ChatInput, asked func(model.ChatInput)) (model.ChatInput, map[string]any, error) {
	r, err := a.askInput(ctx, conversation, in, asked)
	return r.ChatInput, r.Content, err
}

func (a *Approver) askInput(ctx context.Context, conversation string, in model.ChatInput, asked func(model.ChatInput)) (InputRecord, error) {
	if !model.ValidConversationID(conversation) {
		return InputRecord{}, apierr.Invalid("conversation", "conversation must be a slug or a uuid")
	}
	if !model.ValidConversationID(in.InputID) {
		return InputRecord{}, apierr.Invalid("input_id", "input_id must be a slug or a uuid")
	}
	wait := a.inputTimeout
	if d, ok := ctx.Deadline(); ok && time.Until(d)-inputMargin < wait {
		wait = max(time.Until(d)-inputMargin, 0)
	}
	now := a.now().UTC()
	in.AskedAt, in.ExpiresAt = now, now.Add(wait)
	rec := InputRecord{ChatInput: in}
	key := InputKey(conversation, in.InputID)
	data, err := json.Marshal(rec)
	if err != nil {
		return InputRecord{}, err
	}
	if _, err := a.kv.Create(ctx, key, data); err != nil {
		if !errors.Is(err, jetstream.ErrKeyExists) {
			// An unanswered write may have landed (as in Ask).
			a.cleanup(key)
		}
		return InputRecord{}, fmt.Errorf("recording the pending input: %w", err)
	}
	var final InputRecord
	defer func() { a.retire(key, final) }()
	if asked != nil {
		asked(in) // listed as pending before anyone hears of it
	}
	val, rev, err := a.await(ctx, key, wait, func(v []byte) (bool, error) {
		var r InputRecord
		if err := json.Unmarshal(v, &r); err != nil {
			return false, fmt.Errorf("pending input: %w", err)
		}
		return r.Action != "", nil
	})
	switch {
	case errors.Is(err, errExpired):
		final = a.expireInput(key, rec, rev, wait)
		return final, nil
	case err != nil:
		return InputRecord{}, err
	}
	_ = json.Unmarshal(val, &final)
	return final, nil
}

// retire removes an input's key once AskInput is done with it. An answered
// one is purged first (every revision, the answer's content with them) and
// left as a tombstone without the content, so the user's answer does not
// linger in the bucket's history while a late answer is still told
// CONFLICT rather than NOT_FOUND.
func (a *Approver) retire(key string, rec InputRecord) {
	if rec.Action != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		rec.Content = nil
		if err := a.kv.Purge(ctx, key); err == nil {
			data, _ := json.Marshal(rec)
			_, _ = a.kv.Put(ctx, key, data)
		}
		cancel()
	}
	a.cleanup(key)
}

// expireInput writes the timeout's cancel on the input key, unless an
// answer won the race (then that answer stands).
func (a *Approver) expireInput(key string, rec InputRecord, rev uint64, wait time.Duration) InputRecord {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rec.Action = model.InputCancel
	rec.Reason = fmt.Sprintf("nobody answered within %s, so the input was cancelled", wait.Round(time.Second))
	rec.AnsweredAt = a.now().UTC()
	data, _ := json.Marshal(rec)
	if rev != 0 {
		if _, err := a.kv.Update(ctx, key, data, rev); err != nil {
			if e, gerr := a.kv.Get(ctx, key); gerr == nil {
				var r InputRecord
				if json.Unmarshal(e.Value(), &r) == nil && r.Action != "" {
					return r
				}
			}
		}
	}
	return rec
}

// Answer records the user's answer to a pending input: VALIDATION_ERROR for
// a bad request or content that does not fit the form (field = the
// property; nothing is recorded), NOT_FOUND when no such input waits,
// CONFLICT when it was answered already (or timed out).
func (a *Approver) Answer(ctx context.Context, req model.ChatAnswerRequest) error {
	if e := req.Validate(); e != nil {
		return e
	}
	key := InputKey(req.Conversation, req.InputID)
	e, err := a.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		if prev := answeredBefore(ctx, a.kv, key, inputAction); prev != "" {
			return apierr.Newf(apierr.Conflict, "input %q was answered already (%s)", req.InputID, prev)
		}
		return apierr.Newf(apierr.NotFound, "no input %q awaits an answer in conversation %q", req.InputID, req.Conversation)
	}
	if err != nil {
		return err
	}
	var rec InputRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return fmt.Errorf("pending input: %w", err)
	}
	if rec.Action != "" {
		return apierr.Newf(apierr.Conflict, "input %q was answered already (%s)", req.InputID, rec.Action)
	}
	if req.Action == model.InputAccept {
		form, err := elicitform.Parse(rec.RequestedSchema)
		if err != nil {
			return apierr.Wrap(apierr.Internal, "the pending input's form", err)
		}
		if e := form.Check(req.Content); e != nil {
			return e
		}
	}
	rec.Action, rec.Content, rec.AnsweredAt = req.Action, req.Content, a.now().UTC()
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if _, err := a.kv.Update(ctx, key, data, e.Revision()); err != nil {
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
			return apierr.Newf(apierr.Conflict, "input %q was answered meanwhile", req.InputID)
		}
		return err
	}
	return nil
}

// inputAction is what an input was answered with.
func inputAction(r *InputRecord) string { return r.Action }

// PendingInputs lists the inputs of a conversation awaiting an answer,
// oldest first.
func (a *Approver) PendingInputs(ctx context.Context, conversation string) ([]model.ChatInput, error) {
	if e := (&model.ChatConversationRef{Conversation: conversation}).Validate(); e != nil {
		return nil, e
	}
	recs, err := unanswered(ctx, a.kv, conversation+".input.*", inputAction)
	if err != nil {
		return nil, err
	}
	out := make([]model.ChatInput, 0, len(recs))
	for _, r := range recs {
		out = append(out, r.ChatInput)
	}
	slices.SortFunc(out, func(x, y model.ChatInput) int { return x.AskedAt.Compare(y.AskedAt) })
	return out, nil
}
