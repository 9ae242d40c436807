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
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// Call is what a front door knows of a call it may have to hold.
type Call struct {
	Principal string // principal id
	Server    string
	Tool      string // namespaced <server>__<tool>, as clients see it
	// ServerTool is the tool's name as its server gives it (empty: Tool
	// without its server part): rules naming <server>__<it> match too.
	ServerTool string
	Arguments  json.RawMessage
	// Timeout of a new record (0: the rules'), at most model.MaxApprovalTimeout.
	Timeout time.Duration
	// Deferred: the call runs after the request that enforces it has ended
	// (a task). An approval left for the bus then stays until the runner
	// consumes it; otherwise it is consumed when the request ends, if the
	// runner did not (release).
	Deferred bool
}

// Names are the names the rules match c's tool by (model.ToolNames).
func (c Call) Names() []string { return model.ToolNames(c.Tool, c.Server, c.serverTool()) }

// serverTool is ServerTool when it names the tool otherwise than Tool does.
func (c Call) serverTool() string {
	if c.ServerTool == "" || c.Server+"__"+c.ServerTool == c.Tool {
		return ""
	}
	return c.ServerTool
}

// Hold finds or writes the pending record of c (timeout from the rules,
// approvers from the rule that asked). A record already there is returned as
// it is: a retry of a call that waits, or one decided meanwhile.
func (s *Store) Hold(ctx context.Context, c Call, rule *model.GatewayApprovalRule) (model.HeldCall, error) {
	canon, hash, err := model.CanonicalArgs(c.Arguments)
	if err != nil {
		return model.HeldCall{}, apierr.Invalid("arguments", err.Error())
	}
	id := HeldID(c.Principal, c.Tool, hash)
	if h, _, err := s.get(ctx, id); err == nil {
		if h.Decision != model.HeldPending || h.State(s.now()) == model.HeldPending {
			return h, nil
		}
		// Pending but expired: it counts as denied, and the caller is
		// asking anew, so it starts afresh (below, on the revision read).
		_ = s.consume(ctx, h, 0)
	} else if apierr.Of(err) != apierr.NotFound {
		return model.HeldCall{}, err
	}
	now := s.now().UTC()
	if !s.quotas.allow(c.Principal, now) {
		return model.HeldCall{}, apierr.Newf(apierr.RateLimited, "%d of your calls were held for approval within the hour already; wait for their decisions", heldPerHour)
	}
	h := model.HeldCall{ID: id, Principal: c.Principal, Server: c.Server, Tool: c.Tool, ServerTool: c.serverTool(),
		ArgsSHA256: hash, Arguments: canon, CreatedAt: now,
		ExpiresAt: now.Add(s.holdTimeout(ctx, c.Timeout)), Decision: model.HeldPending}
	if rule != nil {
		h.Approvers = rule.Approvers
	}
	data, err := json.Marshal(h)
	if err != nil {
		return h, err
	}
	if _, err := s.heldRetry.Create(ctx, heldKey(id), data); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			got, _, gerr := s.get(ctx, id) // an identical call won the race: share its record
			return got, gerr
		}
		return h, apierr.Wrap(apierr.ServiceUnavailable, "holding the call for approval", err)
	}
	return h, nil
}

// Await waits until h is decided or expires and returns its final record,
// consumed (deleted on the revision read: one approval releases one call).
// An approval another identical call consumed first is a denial here.
func (s *Store) Await(ctx context.Context, h model.HeldCall) (model.HeldCall, error) {
	wctx, cancel := context.WithTimeout(ctx, max(time.Until(h.ExpiresAt), 0))
	defer cancel()
	var got model.HeldCall
	_, rev, err := bus.AwaitKV(wctx, s.held, heldKey(h.ID), func(v []byte) (bool, error) {
		got = model.HeldCall{}
		return json.Unmarshal(v, &got) == nil && got.Decision != model.HeldPending, nil
	})
	switch {
	case ctx.Err() != nil:
		return h, ctx.Err()
	case errors.Is(err, bus.ErrKVWithdrawn), err != nil && wctx.Err() != nil:
		return s.expired(h), nil // past its expiry (or consumed elsewhere): denied
	case err != nil:
		return h, apierr.Wrap(apierr.ServiceUnavailable, "waiting for the decision of a held call", err)
	}
	if got.Decision == model.HeldApproved && s.release(ctx, got, rev) != nil {
		got.Decision, got.Reason = model.HeldDenied, "the approval was used by another identical call"
	} else if got.Decision != model.HeldApproved {
		_ = s.consume(ctx, got, rev)
	}
	return got, nil
}

// Take consumes a decided record (a retry finding its call decided) and
// returns it; a pending one is returned untouched.
func (s *Store) Take(ctx context.Context, h model.HeldCall) (model.HeldCall, error) {
	cur, rev, err := s.get(ctx, h.ID)
	if err != nil {
		return h, err
	}
	if cur.State(s.now()) == model.HeldPending {
		return cur, nil
	}
	if cur.Decision == model.HeldPending {
		cur = s.expired(cur)
	}
	if cur.Decision == model.HeldApproved {
		if s.release(ctx, cur, rev) != nil {
			cur.Decision, cur.Reason = model.HeldDenied, "the approval was used by another identical call"
		}
	} else {
		_ = s.consume(ctx, cur, rev)
	}
	return cur, nil
}

// expired is h denied by its timeout (and its record deleted).
func (s *Store) expired(h model.HeldCall) model.HeldCall {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for range 3 {
		cur, rev, err := s.get(ctx, h.ID)
		if err != nil {
			break
		}
		if cur.Decision != model.HeldPending && cur.Decision != "" {
			// A decision won the race with the timeout: it stands.
			if cur.Decision == model.HeldApproved && s.release(ctx, cur, rev) != nil {
				cur.Decision, cur.Reason = model.HeldDenied, "the approval was used by another identical call"
			}
			return cur
		}
		if s.beforeExpire != nil {
			s.beforeExpire()
		}
		if s.consume(ctx, cur, rev) == nil {
			break
		}
		// The record moved since it was read: a decision landed meanwhile
		// (denying the call then would leave an approval for the next
		// identical one, and tell its approver it was used). Read again.
	}
	h.Decision, h.DecidedAt = model.HeldDenied, s.now().UTC()
	h.Reason = fmt.Sprintf("nobody approved the call by %s, so it was denied", h.ExpiresAt.Format(time.RFC3339))
	return h
}

// release uses the approval of h: a front door leaves it when the rules hold
// the same call on the bus too (the runner's Gate finds it approved and
// consumes it there), else it is consumed here.
func (s *Store) release(ctx context.Context, h model.HeldCall, rev uint64) error {
	if s.leaveForBus && s.Check(h.Principal, h.ToolNames()...).Decision == model.ApprovalAsk {
		if Sweeps(ctx) && rev != 0 {
			// The runner consumes it when the call arrives, unless its own
			// watch of the rules has not yet seen them ask: then the
			// approval would release the next identical call too. When the
			// request ends the call has reached the runner or never will,
			// so what is left at this revision is consumed then.
			context.AfterFunc(ctx, func() { _ = s.consume(ctx, h, rev) })
		}
		return nil
	}
	return s.consume(ctx, h, rev)
}

// sweepKey marks the context of a request whose approval left for the bus
// is consumed when the request ends (Call.Deferred unset).
type sweepKey struct{}

// Sweeping marks ctx, the context of a request that makes its call before
// it ends: an approval Take or Await leaves for the bus under it is
// consumed when ctx ends, if the runner has not (Enforce does this unless
// Call.Deferred). Not for a call that runs after ctx ends (a task).
func Sweeping(ctx context.Context) context.Context {
	return context.WithValue(ctx, sweepKey{}, true)
}

// Sweeps reports whether ctx is marked by Sweeping.
func Sweeps(ctx context.Context) bool {
	sweeps, _ := ctx.Value(sweepKey{}).(bool)
	return sweeps
}

// holdTimeout is the wait of a new held call: the caller's, else the stored
// rules' (read only then).
func (s *Store) holdTimeout(ctx context.Context, d time.Duration) time.Duration {
	if d <= 0 {
		return s.storedRules(ctx).Timeout()
	}
	return min(d, model.MaxApprovalTimeout)
}

// consume deletes h's record on revision rev (0: whatever it is).
func (s *Store) consume(ctx context.Context, h model.HeldCall, rev uint64) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if rev == 0 {
		return s.held.Delete(ctx, heldKey(h.ID))
	}
	return s.held.Delete(ctx, heldKey(h.ID), jetstream.LastRevision(rev))
}

// Decide approves or denies held call req.ID as principal id by: NOT_FOUND
// when no such call is held or by may not decide it (neither an admin nor
// an approver the holding rule names, nor the caller answering its own
// call), CONFLICT when it was decided or expired (or another answer wins
// the race). asCaller says the calling client itself answers (its user
// approves their own call, which the client declared it can ask about).
// The id derives from principal, tool and arguments, so anyone may compute
// it for a guessed call: who may not decide a call learns nothing of it,
// not even whether it is held or how it was decided.
func (s *Store) Decide(ctx context.Context, req model.ApprovalDecideRequest, by string, admin, asCaller bool) (model.HeldCall, error) {
	if e := req.Validate(); e != nil {
		return model.HeldCall{}, e
	}
	may := func(h model.HeldCall) bool { return (asCaller && by == h.Principal) || h.MayDecide(by, admin) }
	h, rev, err := s.get(ctx, req.ID)
	if apierr.Of(err) == apierr.NotFound {
		if prev, ok := s.decidedBefore(ctx, req.ID); ok && may(prev) {
			return model.HeldCall{}, apierr.Newf(apierr.Conflict, "call %q was decided already (%s)", req.ID, prev.Decision)
		}
		return model.HeldCall{}, err
	}
	if err != nil {
		return model.HeldCall{}, err
	}
	if !may(h) {
		return model.HeldCall{}, notHeld(req.ID)
	}
	if st := h.State(s.now()); st != model.HeldPending {
		return model.HeldCall{}, apierr.Newf(apierr.Conflict, "call %q was decided already (%s)", req.ID, st)
	}
	decision := model.HeldDenied
	if req.Decision == model.DecisionApprove {
		decision = model.HeldApproved
	}
	h, err = s.decide(ctx, h, rev, decision, by, req.Reason)
	if lostRace(err) {
		return h, apierr.Newf(apierr.Conflict, "call %q was decided meanwhile", req.ID)
	}
	return h, err
}

// decide records decision on h, pending as read at revision rev, as by's
// with reason, and audits it; a lost compare-and-set is lostRace.
func (s *Store) decide(ctx context.Context, h model.HeldCall, rev uint64, decision, by, reason string) (model.HeldCall, error) {
	h.Decision, h.DecidedBy, h.DecidedAt, h.Reason = decision, by, s.now().UTC(), reason
	data, err := json.Marshal(h)
	if err != nil {
		return h, err
	}
	if _, err := s.heldRetry.Update(ctx, heldKey(h.ID), data, rev); err != nil {
		return h, err
	}
	if s.audit != nil {
		s.audit.Record(model.GatewayAuditEvent{Action: model.GatewayHeldDecided, Principal: by, HeldID: h.ID, Server: h.Server, Tool: h.Tool, Decision: h.Decision, Reason: reason})
	}
	return h, nil
}

// lostRace reports an update that met another's write (a decision, the
// waiter's consume) since the read.
func lostRace(err error) bool {
	return errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists)
}

// decidedBefore is the last record, decided, of a call its waiter deleted
// already (false: none).
func (s *Store) decidedBefore(ctx context.Context, id string) (model.HeldCall, bool) {
	if !isHeldID(id) {
		return model.HeldCall{}, false
	}
	hist, err := s.held.History(ctx, heldKey(id))
	if err != nil {
		return model.HeldCall{}, false
	}
	for i := len(hist) - 1; i >= 0; i-- {
		if hist[i].Operation() != jetstream.KeyValuePut {
			continue
		}
		var h model.HeldCall
		if json.Unmarshal(hist[i].Value(), &h) == nil && h.Decision != model.HeldPending {
			return h, true
		}
		return model.HeldCall{}, false
	}
	return model.HeldCall{}, false
}

// List is the calls that wait for a decision, oldest first; those a
// non-admin may not decide are left out for them.
func (s *Store) List(ctx context.Context, by string, admin bool) ([]model.HeldCall, error) {
	lister, err := s.held.ListKeysFiltered(ctx, "held.*")
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return []model.HeldCall{}, nil
		}
		return nil, err
	}
	out := []model.HeldCall{}
	seen := map[string]bool{}
	now := s.now()
	for key := range lister.Keys() {
		if seen[key] {
			continue // a lister may repeat keys
		}
		seen[key] = true
		e, err := s.held.Get(ctx, key)
		if err != nil {
			continue // consumed meanwhile
		}
		var h model.HeldCall
		if json.Unmarshal(e.Value(), &h) != nil || h.State(now) != model.HeldPending || !h.MayDecide(by, admin) {
			continue
		}
		out = append(out, h)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(x, y model.HeldCall) int { return x.CreatedAt.Compare(y.CreatedAt) })
	return out, nil
}
