package approvals

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/model"
)

// DenyCallsOf denies every call principal has waiting for a decision, as
// by with reason, and returns how many it denied. A principal that may act
// no longer (a revoked API key) must not have calls an approver could still
// release: its request waiting for the decision, or a durable task made once
// approved, would then run in its name after the revocation. A call decided
// meanwhile keeps its decision (compare-and-set, read again on a race).
func (s *Store) DenyCallsOf(ctx context.Context, principal, by, reason string) (int, error) {
	lister, err := s.held.ListKeysFiltered(ctx, "held.*")
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("listing the held calls: %w", err)
	}
	seen := map[string]bool{}
	denied := 0
	for key := range lister.Keys() {
		if seen[key] {
			continue // a lister may repeat keys
		}
		seen[key] = true
		ok, err := s.denyIfOf(ctx, key, principal, by, reason)
		if err != nil {
			return denied, err
		}
		if ok {
			denied++
		}
	}
	return denied, ctx.Err()
}

// denyIfOf denies the held call under key when it is principal's and still
// pending, and reports whether it did.
func (s *Store) denyIfOf(ctx context.Context, key, principal, by, reason string) (bool, error) {
	for range 3 {
		e, err := s.held.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return false, nil // consumed meanwhile
		}
		if err != nil {
			return false, fmt.Errorf("reading held call %s: %w", key, err)
		}
		var h model.HeldCall
		if json.Unmarshal(e.Value(), &h) != nil || h.Principal != principal || h.State(s.now()) != model.HeldPending {
			return false, nil
		}
		_, err = s.decide(ctx, h, e.Revision(), model.HeldDenied, by, reason)
		if lostRace(err) {
			continue // decided or consumed meanwhile: read again
		}
		if err != nil {
			return false, fmt.Errorf("denying held call %s: %w", h.ID, err)
		}
		return true, nil
	}
	return false, nil
}
