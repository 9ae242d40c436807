package approvals

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// DenyCallsOf denies every call principal has waiting for a decision, as
// by with reason, and returns how many it denied. A principal that may act
// no longer (a revoked API key) must not have calls an approver could still
// release: its request waiting for the decision, or a durable task made once
// approved, would then run in its name after the revocation. A call decided
// meanwhile keeps its decision (compare-and-set, read again on a race).
func (s *Store) DenyCallsOf(ctx context.Context, principal, by, reason string) (int, error) {
	return s.DenyCallsMatching(ctx, func(p string) bool { return p == principal }, by, reason)
}

// DenyCallsMatching is DenyCallsOf for every principal match accepts (the
// principals of a revoked OAuth subject, of any issuer).
func (s *Store) DenyCallsMatching(ctx context.Context, match func(principal string) bool, by, reason string) (int, error) {
	return s.eachHeld(ctx, func(key string) (bool, error) {
		denied, _, err := s.withdrawIfOf(ctx, key, match, by, reason, false)
		return denied, err
	})
}

// ForgetCallsOf withdraws every held call of principal: a pending one is
// denied (as DenyCallsOf does, so its waiter is refused and an approver
// deciding later gets CONFLICT), and every record of principal, pending,
// approved or denied, is then deleted. It returns how many calls it
// withdrew. It is for a principal whose id may be given again to someone
// else (an agent revoked and made again with the same name is the same
// agent:<name>): an approval left for the old one would release the
// identical call of the new one, whose held call ids are the same (HeldID).
func (s *Store) ForgetCallsOf(ctx context.Context, principal, by, reason string) (int, error) {
	match := func(p string) bool { return p == principal }
	return s.eachHeld(ctx, func(key string) (bool, error) {
		denied, removed, err := s.withdrawIfOf(ctx, key, match, by, reason, true)
		return denied || removed, err
	})
}

// OAuthSubjectOf matches the principals of OAuth subject sub
// (oauth:<issuer>#<sub>, libs/principal): of issuer iss alone, or of any
// issuer when iss is empty (a revocation by subject names the issuer or not:
// jwtauth.Revocations).
func OAuthSubjectOf(iss, sub string) func(principal string) bool {
	return func(p string) bool {
		rest, ok := strings.CutPrefix(p, "oauth:")
		if !ok {
			return false
		}
		// An issuer identifier has no '#': the first one ends it.
		gotIss, gotSub, ok := strings.Cut(rest, "#")
		return ok && gotSub == sub && (iss == "" || gotIss == iss)
	}
}

// eachHeld runs fn on each held call's key and counts the calls fn reports.
func (s *Store) eachHeld(ctx context.Context, fn func(key string) (bool, error)) (int, error) {
	lister, err := s.held.ListKeysFiltered(ctx, "held.*")
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("listing the held calls: %w", err)
	}
	seen := map[string]bool{}
	n := 0
	for key := range lister.Keys() {
		if seen[key] {
			continue // a lister may repeat keys
		}
		seen[key] = true
		ok, err := fn(key)
		if err != nil {
			return n, err
		}
		if ok {
			n++
		}
	}
	return n, ctx.Err()
}

// withdrawIfOf denies the held call under key when match accepts its
// principal and it is still pending, and with remove then deletes its record
// whatever its state. It reports whether it denied the call and whether it
// removed the record.
func (s *Store) withdrawIfOf(ctx context.Context, key string, match func(string) bool, by, reason string, remove bool) (denied, removed bool, err error) {
	for range 3 {
		e, err := s.held.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return denied, false, nil // consumed meanwhile
		}
		if err != nil {
			return denied, false, fmt.Errorf("reading held call %s: %w", key, err)
		}
		var h model.HeldCall
		if json.Unmarshal(e.Value(), &h) != nil || !match(h.Principal) {
			return denied, false, nil
		}
		if h.State(s.now()) == model.HeldPending {
			_, err = s.decide(ctx, h, e.Revision(), model.HeldDenied, by, reason)
			if lostRace(err) {
				continue // decided or consumed meanwhile: read again
			}
			if err != nil {
				return denied, false, fmt.Errorf("denying held call %s: %w", h.ID, err)
			}
			denied = true
			if !remove {
				return true, false, nil
			}
			continue // read the denied record again, to delete it
		}
		if !remove {
			return denied, false, nil
		}
		// On the revision read: an approval landing meanwhile is read
		// again and deleted too, never left behind.
		err = s.held.Delete(ctx, key, jetstream.LastRevision(e.Revision()))
		if lostRace(err) {
			continue
		}
		if err != nil {
			return denied, false, fmt.Errorf("deleting held call %s: %w", h.ID, err)
		}
		return denied, true, nil
	}
	return denied, false, fmt.Errorf("held call %s kept changing while it was withdrawn", key)
}

// BindHeld binds the held calls' bucket (made by the gateway, the chat or a
// runner) for a process that only withdraws calls (ForgetCallsOf,
// DenyCallsOf): mcpbus up's host, on an agent's revocation. It follows no
// rules (Check allows everything) and makes no bucket: none yet is
// ErrNoHeldCalls, nothing was ever held.
func BindHeld(ctx context.Context, js jetstream.JetStream, log *slog.Logger) (*Store, error) {
	kv, err := js.KeyValue(ctx, bus.BucketApprovals)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, ErrNoHeldCalls
	}
	if err != nil {
		return nil, fmt.Errorf("binding the held calls (KV %s): %w", bus.BucketApprovals, err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Store{held: kv, heldRetry: bus.RetryKV(kv), now: time.Now, log: log, ready: make(chan struct{})}
	s.rules.Store(&revRules{})
	return s, nil
}

// ErrNoHeldCalls is BindHeld's answer when no bucket of held calls exists.
var ErrNoHeldCalls = errors.New("no call was ever held for approval on this bus")
