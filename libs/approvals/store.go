// Package approvals is the one engine that holds tool calls for a person's
// approval (issue 30 item 2), used by the gateway (/mcp, /mcp/invoke), the
// chat service (a profile's rules) and the runners (every call on the bus:
// Gate). The rules (model.ApprovalRules) live in KV mcp_approval_rules, key
// "policy", followed by every user of the store; a held call is a record in
// KV mcp_approvals (held.<id>), so any instance sees it, decides it and
// releases its retry.
//
// A held call's id is derived from what it binds — the caller's principal,
// the tool and the SHA-256 of the canonical arguments — so the same call
// asked again (a client's retry, after a gateway restart too) finds its
// record, and a call with any other argument is another call needing its own
// approval. Decisions are compare-and-set on the revision the decider read
// (of two answers one wins, the other gets CONFLICT) and awaited with
// bus.AwaitKV, as the chat's approvals (services/chat/approvals) are; a
// pending call past its expiry counts as denied wherever it is read (fail
// closed), so no instance has to be alive to time it out. An approval releases one call: the waiter
// deletes the record on the revision it read, so two callers cannot both
// use it. A front door (Options.LeaveForBus) leaves an approved record the
// rules also hold on the bus to the runner, which consumes it when the call
// arrives: the call is not held twice, and still runs once.
package approvals

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
)

// HeldTTL is how long a held call's record stays after its last write:
// twice the longest timeout, so a decided call can still be retried a while.
const HeldTTL = 2 * model.MaxApprovalTimeout

// Auditor records the store's decisions and rule changes (the gateway's
// audit chain); the store never waits on it.
type Auditor interface {
	Record(model.GatewayAuditEvent)
}

// rulesKey is the one key of the rules bucket.
const rulesKey = "policy"

// Options configure Open; zero values take the defaults.
type Options struct {
	// Replicas of the buckets (1 embedded, 3 on a cluster).
	Replicas int
	Logger   *slog.Logger
	// Audit records decisions and rule changes (nil: not recorded).
	Audit Auditor
	// Now is the clock of created_at, expires_at and decided_at.
	Now func() time.Time
	// LeaveForBus is set by the front doors (gateway, chat), whose calls
	// then reach a runner that applies the same rules (Gate): an approved
	// call the rules ask about is left for the runner to consume, else the
	// front door consumes it itself.
	LeaveForBus bool
}

// Store is the rules and the held calls; safe for concurrent use.
type Store struct {
	rulesKV jetstream.KeyValue
	held    jetstream.KeyValue
	// heldRetry is held with reads and writes that ride out a leader
	// election (bus.RetryKV): a hold, a read of a record, a decision. The
	// consuming deletes stay on held: a retried delete that found the record
	// gone could not tell its own unanswered try from an identical call's,
	// and one approval must release one call.
	heldRetry jetstream.KeyValue
	rules     atomic.Pointer[revRules]
	ready     chan struct{}
	now       func() time.Time
	log       *slog.Logger
	audit     Auditor
	// leaveForBus: Options.LeaveForBus.
	leaveForBus bool
	// replicated: the buckets have more than one replica, so a read (a
	// direct get, which any replica answers) may reach one that has not
	// applied a write already acknowledged (get reads again before it says
	// a call is not held).
	replicated bool
	quotas     holdQuotas
	// beforeExpire runs between a timed-out call's read and its removal
	// (tests race a decision there).
	beforeExpire func()
}

// revRules are rules and the bucket revision they were written at (0: none
// read yet, or a snapshot without the key).
type revRules struct {
	model.ApprovalRules
	rev uint64
}

// Open creates (or opens) both buckets and follows the rules until ctx ends.
func Open(ctx, setup context.Context, nc *nats.Conn, opts Options) (*Store, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	s := &Store{ready: make(chan struct{}), now: opts.Now, log: opts.Logger, leaveForBus: opts.LeaveForBus, audit: opts.Audit}
	s.rules.Store(&revRules{})
	replicas := max(opts.Replicas, 1)
	s.replicated = replicas > 1
	if s.rulesKV, err = bus.EnsureKV(setup, js, jetstream.KeyValueConfig{
		Bucket:      bus.BucketApprovalRules,
		Description: "the approval rules of tool calls, applied by the gateway and the runners (key policy: model.ApprovalRules)",
		History:     5,
		Storage:     jetstream.FileStorage,
	}, replicas, opts.Logger); err != nil {
		return nil, err
	}
	if s.held, err = bus.EnsureKV(setup, js, jetstream.KeyValueConfig{
		Bucket:      bus.BucketApprovals,
		Description: "tool calls held for approval by the gateway, the chat and the runners (held.<id>: model.HeldCall)",
		// The decided value survives the waiter's delete, so a late second
		// answer is told CONFLICT rather than NOT_FOUND.
		History: 3,
		// A record outlives its longest timeout by far; then it goes, so
		// calls nobody retried (decided, or expired) do not pile up.
		TTL:     HeldTTL,
		Storage: jetstream.FileStorage,
	}, replicas, opts.Logger); err != nil {
		return nil, err
	}
	s.heldRetry = bus.RetryKV(s.held)
	var once atomic.Bool
	go bus.FollowKV(ctx, nc, s.rulesKV, bus.KVHandler{
		Snapshot: func(m map[string]jetstream.KeyValueEntry) {
			// A snapshot is the bucket as it is: it replaces whatever
			// this instance held (after a bucket was made again its
			// revisions start over).
			if e, ok := m[rulesKey]; ok {
				if r, ok := s.decodeRules(e.Value()); ok {
					s.rules.Store(&revRules{r, e.Revision()})
				}
			} else {
				s.rules.Store(&revRules{})
			}
		},
		Update: func(e jetstream.KeyValueEntry) {
			if e.Key() != rulesKey {
				return
			}
			if e.Operation() != jetstream.KeyValuePut {
				s.applyRules(model.ApprovalRules{}, e.Revision())
				return
			}
			if r, ok := s.decodeRules(e.Value()); ok {
				s.applyRules(r, e.Revision())
			}
		},
		Ready: func() {
			if once.CompareAndSwap(false, true) {
				close(s.ready)
			}
		},
	}, bus.KVFollowOptions{Logger: opts.Logger})
	select {
	case <-s.ready:
	case <-setup.Done():
		return nil, apierr.Wrap(apierr.ServiceUnavailable, "reading the approval rules", setup.Err())
	}
	return s, nil
}

// decodeRules reads a stored policy; one that does not decode keeps the
// last good one (it was validated when written).
func (s *Store) decodeRules(data []byte) (model.ApprovalRules, bool) {
	var r model.ApprovalRules
	if err := json.Unmarshal(data, &r); err != nil {
		s.log.Warn("approval rules do not decode; keeping the previous ones", "error", err)
		return r, false
	}
	return r, true
}

// applyRules puts r, written at revision rev, in force unless newer rules
// are: PutRules applies its own write when the bucket acknowledges it, and
// by then the watch may have applied another instance's later write, which
// must not be undone (that instance, and every other, enforces it).
func (s *Store) applyRules(r model.ApprovalRules, rev uint64) {
	next := &revRules{r, rev}
	for {
		cur := s.rules.Load()
		if cur.rev >= rev {
			return
		}
		if s.rules.CompareAndSwap(cur, next) {
			return
		}
	}
}

// Rules are the rules in force.
func (s *Store) Rules() model.ApprovalRules { return s.rules.Load().ApprovalRules }

// storedRules are the rules as stored now, read through rather than from the
// watch: a held call's timeout is the one an admin set the moment before,
// whichever instance holds it (the watch may lag a rules change by a few
// milliseconds). Holding is rare and waits seconds, so the read costs
// nothing that matters; an unreadable bucket leaves the watched rules.
func (s *Store) storedRules(ctx context.Context) model.ApprovalRules {
	// Bounded: during an election the read goes unanswered, and waiting
	// for it would spend the held call's own deadline.
	rctx, cancel := context.WithTimeout(ctx, storedRulesWait)
	defer cancel()
	e, err := s.rulesKV.Get(rctx, rulesKey)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return model.ApprovalRules{}
		}
		return s.Rules()
	}
	var r model.ApprovalRules
	if json.Unmarshal(e.Value(), &r) != nil {
		return s.Rules()
	}
	return r
}

// storedRulesWait bounds storedRules' read.
const storedRulesWait = 2 * time.Second

// PutRules validates and stores the rules; this instance applies them at once.
func (s *Store) PutRules(ctx context.Context, r model.ApprovalRules) (model.ApprovalRules, error) {
	if e := r.Validate(); e != nil {
		return r, e
	}
	data, err := json.Marshal(r)
	if err != nil {
		return r, err
	}
	rev, err := bus.RetryKV(s.rulesKV).Put(ctx, rulesKey, data) // idempotent: rides out an election
	if err != nil {
		return r, apierr.Wrap(apierr.ServiceUnavailable, "storing the approval rules", err)
	}
	s.applyRules(r, rev)
	if s.audit != nil {
		s.audit.Record(model.GatewayAuditEvent{Action: model.GatewayRulesChanged, Principal: principal.Actor(ctx), Rules: len(r.Rules), Default: r.Default})
	}
	return r, nil
}

// HeldID is the id of the call of tool by principal with arguments hashing
// to argsHash: the same call gets the same id.
func HeldID(principal, tool, argsHash string) string {
	sum := sha256.Sum256([]byte(principal + "\x00" + tool + "\x00" + argsHash))
	return hex.EncodeToString(sum[:16])
}

func heldKey(id string) string { return "held." + id }

// notHeld is the answer for a call that is not held, or not the asker's to know of.
func notHeld(id string) error {
	return apierr.Newf(apierr.NotFound, "no call %q is held for approval", id).WithField("id")
}

// isHeldID reports whether id has the form HeldID gives (32 lowercase hex
// digits). Any other is no held call: it must not reach the bucket, where
// one with '*' or '>' is a KV error (answered 500) or, in a watch, a
// wildcard over other calls.
func isHeldID(id string) bool {
	if len(id) != 32 {
		return false
	}
	for _, c := range []byte(id) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// get reads a held call and its revision (NOT_FOUND when none).
func (s *Store) get(ctx context.Context, id string) (model.HeldCall, uint64, error) {
	if !isHeldID(id) {
		return model.HeldCall{}, 0, notHeld(id)
	}
	e, err := s.heldRetry.Get(ctx, heldKey(id))
	// A hold acknowledged just after a leader election was not found by the
	// decision that followed (a replica that had not applied it answered
	// the get: TestHoldAndDecideRideOutALeaderElection failed so in CI).
	for try := 0; s.replicated && try < staleReads && errors.Is(err, jetstream.ErrKeyNotFound); try++ {
		select {
		case <-ctx.Done():
			return model.HeldCall{}, 0, notHeld(id)
		case <-time.After(staleReadWait):
		}
		e, err = s.heldRetry.Get(ctx, heldKey(id))
	}
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return model.HeldCall{}, 0, notHeld(id)
	}
	if err != nil {
		return model.HeldCall{}, 0, err
	}
	var h model.HeldCall
	if err := json.Unmarshal(e.Value(), &h); err != nil {
		return model.HeldCall{}, 0, apierr.Wrap(apierr.Internal, "held call record", err)
	}
	return h, e.Revision(), nil
}

// staleReads and staleReadWait bound get's reads again on a replicated
// bucket: a replica applies a committed write within milliseconds.
const (
	staleReads    = 2
	staleReadWait = 200 * time.Millisecond
)

// Get is the held call id as stored (its State says whether it expired).
func (s *Store) Get(ctx context.Context, id string) (model.HeldCall, error) {
	h, _, err := s.get(ctx, id)
	return h, err
}
