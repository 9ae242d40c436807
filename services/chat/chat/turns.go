package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/chat/loop"
)

// Turns and who drives them. An instance drives a conversation's turn while
// it holds the key lease.<conversation> of bus.BucketChatTurns, renewed
// every LeaseTTL/3 with compare-and-set. Every instance watches the leases:
// one whose revision has not moved for a whole LeaseTTL belongs to an
// instance that died, and the first to swap it for its own resumes the turn
// from the log. Staleness is judged by each watcher's own clock (how long
// it has seen the same revision), so the instances' clocks need not agree.
// An instance that stops cleanly does not leave its leases to lapse: it
// marks each released (compare-and-set on the revision it holds, so never
// another's), and every instance watching takes a released lease over at
// once. The key stays, naming the turn, so an instance started later (the
// same one restarted) finds and resumes it too.
// A cancellation is the key cancel.<conversation> naming the turn: the
// driver watches it, and so does whoever resumes a turn.

const (
	leasePrefix  = "lease."
	cancelPrefix = "cancel."
)

func leaseKey(conv string) string  { return leasePrefix + conv }
func cancelKey(conv string) string { return cancelPrefix + conv }

// leaseValue is the value of a lease key.
type leaseValue struct {
	Instance string    `json:"instance"`
	Turn     string    `json:"turn,omitempty"`
	Since    time.Time `json:"since"`
	// Released: the instance stopped cleanly and hands the turn over; any
	// instance takes it at once instead of after a TTL.
	Released bool `json:"released,omitempty"`
}

// cancelValue is the value of a cancel key.
type cancelValue struct {
	Turn string    `json:"turn"`
	At   time.Time `json:"at"`
}

// drive is a turn this instance drives.
type drive struct {
	conv string
	turn string
	// rev is the lease's revision: only the goroutine of start and, while
	// it runs, renew (which start waits for) touch it.
	rev    uint64
	cancel context.CancelFunc
	// stop ends the drive without a turn_end (errStopping: the service
	// stops and hands the lease over; loop.ErrHandOff: the lease was lost):
	// the turn is left for another instance to resume.
	stop func(cause error)
}

// errStopping is the cause of a drive's end when its instance stops: the
// drive hands its lease over (handOver) rather than letting it lapse.
var errStopping = fmt.Errorf("%w: this instance stops", loop.ErrHandOff)

func (s *Service) putLease(ctx context.Context, conv, turn string, rev uint64) (uint64, error) {
	val, _ := json.Marshal(leaseValue{Instance: s.opts.ID, Turn: turn, Since: time.Now().UTC()})
	if rev == 0 {
		return s.turns.Create(ctx, leaseKey(conv), val)
	}
	return s.turns.Update(ctx, leaseKey(conv), val, rev)
}

// releaseWait bounds how long a send waits for the lease of a turn whose
// end is already in the log: its driver gives the lease up just after
// writing the end (which is what clients see as done), so a send made on
// that done event may find the lease still held for a few milliseconds.
const releaseWait = 2 * time.Second

// takeLease claims a conversation for a new turn: CONFLICT when a turn runs.
func (s *Service) takeLease(ctx context.Context, conv string) (*drive, error) {
	busy := func(turn string) error {
		if turn == "" {
			return apierr.Newf(apierr.Conflict, "conversation %s has a turn starting or is being deleted: try again in a moment", conv)
		}
		return apierr.Newf(apierr.Conflict, "conversation %s has a turn running (%s): wait for its done event or cancel it", conv, turn)
	}
	var ended string // the lease's turn, once the log shows its end
	deadline := time.Now().Add(releaseWait)
	for {
		rev, err := s.putLease(ctx, conv, "", 0)
		if err == nil {
			return &drive{conv: conv, rev: rev}, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, apierr.Wrap(apierr.ServiceUnavailable, "taking the lease of conversation "+conv, err)
		}
		var lv leaseValue
		e, gerr := s.turns.Get(ctx, leaseKey(conv))
		if gerr == nil {
			_ = json.Unmarshal(e.Value(), &lv)
		}
		released := errors.Is(gerr, jetstream.ErrKeyNotFound)
		running := !released && (lv.Turn == "" || (lv.Turn != ended && !s.turnEnded(ctx, conv, lv.Turn)))
		if running || time.Now().After(deadline) {
			return nil, busy(lv.Turn)
		}
		ended = lv.Turn
		select {
		case <-ctx.Done():
			return nil, busy(lv.Turn)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// turnEnded reports whether conv's log holds turn's end.
func (s *Service) turnEnded(ctx context.Context, conv, turn string) bool {
	entries, err := s.convs.Read(ctx, conv)
	if err != nil {
		return false
	}
	for i := len(entries) - 1; i >= 0; i-- {
		if entries[i].Turn == turn && entries[i].Kind == model.EntryTurnEnd {
			return true
		}
	}
	return false
}

// release gives the lease up (compare-and-set: never another's lease).
func (s *Service) release(d *drive) {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultRequestTimeout)
	defer cancel()
	if err := s.turns.Delete(ctx, leaseKey(d.conv), jetstream.LastRevision(d.rev)); err != nil {
		s.log.Warn("chat: releasing a turn's lease failed; it lapses", "conversation", d.conv, "err", err)
	}
}

// start drives a turn in the background: it renews the lease, watches for
// a cancellation, and gives the lease up when the turn has ended. The
// turn's spans continue the trace of from (the send that began it; none
// for a turn resumed here), though the drive outlives from itself: the
// operator follows a /v1/chat/completions or chat send to its model steps
// and tool calls in one trace.
func (s *Service) start(from context.Context, d *drive, turn string, run func(context.Context) (model.ChatDone, error)) {
	d.turn = turn
	base := trace.ContextWithSpanContext(context.Background(), trace.SpanContextFromContext(from))
	ctx, stop := context.WithCancelCause(base)
	turnCtx, cancel := context.WithCancel(ctx)
	d.cancel, d.stop = cancel, func(cause error) { stop(cause) }
	s.mu.Lock()
	s.running[d.conv] = d
	s.mu.Unlock()
	// The lease names the turn before anyone hears of it: a cancellation
	// right after the send's reply finds it.
	lctx, lcancel := context.WithTimeout(ctx, DefaultRequestTimeout)
	if rev, err := s.putLease(lctx, d.conv, turn, d.rev); err == nil {
		d.rev = rev
	}
	lcancel()
	s.log.Debug("chat: driving a turn", "conversation", d.conv, "turn", turn)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer cancel()
		keep, stopKeeping := context.WithCancel(ctx)
		renewed := make(chan struct{})
		go func() { defer close(renewed); s.renew(keep, d) }()
		go s.watchCancel(keep, d)
		done, err := run(turnCtx)
		stopKeeping()
		<-renewed
		s.mu.Lock()
		delete(s.running, d.conv)
		s.mu.Unlock()
		if ctx.Err() != nil {
			// Stopped or lost: another instance resumes the turn, at once
			// when this one stops cleanly.
			if errors.Is(context.Cause(ctx), errStopping) {
				s.handOver(d)
			}
			return
		}
		stop(nil)
		if err != nil && turnCtx.Err() != nil && s.endCancelled(d) {
			err = nil // cancelled before the loop could write its end: written here
		}
		if err != nil {
			// The log refused (another writer, NATS away): the lease lapses
			// and a fresh reading of the log resumes the turn.
			s.log.Warn("chat: a turn stopped before its end; it will be resumed", "conversation", d.conv, "turn", turn, "err", err)
			return
		}
		s.log.Debug("chat: turn ended", "conversation", d.conv, "turn", turn, "reason", done.Reason)
		s.chargeTurn(d.conv)
		s.clearCancel(d)
		s.release(d)
	}()
}

// renew keeps the lease until ctx ends; a lost lease stops the drive.
func (s *Service) renew(ctx context.Context, d *drive) {
	t := time.NewTicker(s.opts.LeaseTTL / 3)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c, cancel := context.WithTimeout(ctx, s.opts.LeaseTTL/3)
		rev, err := s.putLease(c, d.conv, d.turn, d.rev)
		cancel()
		if errors.Is(err, jetstream.ErrKeyExists) {
			if own, ok := s.ownLease(ctx, d); ok {
				// An earlier renewal was applied unanswered: the lease is
				// still this drive's, at a revision it did not learn.
				d.rev, err = own, nil
			}
		}
		switch {
		case err == nil && rev == 0:
			// Adopted: the next tick renews it; last stays the last
			// renewal answered.
		case err == nil:
			d.rev, last = rev, time.Now()
		case ctx.Err() != nil:
			return
		case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyNotFound), time.Since(last) >= s.opts.LeaseTTL:
			s.log.Warn("chat: lost the lease of a running turn; another instance resumes it", "conversation", d.conv, "err", err)
			d.stop(loop.ErrHandOff)
			return
		}
	}
}

// handOver marks the lease of a drive this stopping instance ends as
// released, with compare-and-set on the revision it holds (a renewal applied
// unanswered is recognised by ownLease), so another instance resumes the
// turn at once; when that fails the lease lapses as after a crash.
func (s *Service) handOver(d *drive) {
	ctx, cancel := context.WithTimeout(context.Background(), min(DefaultRequestTimeout, s.opts.LeaseTTL))
	defer cancel()
	val, _ := json.Marshal(leaseValue{Instance: s.opts.ID, Turn: d.turn, Since: time.Now().UTC(), Released: true})
	_, err := s.turns.Update(ctx, leaseKey(d.conv), val, d.rev)
	if errors.Is(err, jetstream.ErrKeyExists) {
		if own, ok := s.ownLease(ctx, d); ok {
			_, err = s.turns.Update(ctx, leaseKey(d.conv), val, own)
		}
	}
	if err != nil {
		s.log.Warn("chat: handing a turn over failed; its lease lapses", "conversation", d.conv, "turn", d.turn, "err", err)
		return
	}
	s.log.Info("chat: handed a turn over on stopping", "conversation", d.conv, "turn", d.turn)
}

// ownLease returns the revision of conversation d.conv's lease when it is
// still d's: this instance's, for d's turn. A renewal whose answer was lost
// (a leader change, the connection's node dying, a commit slower than the
// renewal's wait) may have been applied, leaving the lease one revision on.
func (s *Service) ownLease(ctx context.Context, d *drive) (uint64, bool) {
	c, cancel := context.WithTimeout(ctx, s.opts.LeaseTTL/3)
	defer cancel()
	e, err := s.turns.Get(c, leaseKey(d.conv))
	if err != nil {
		return 0, false
	}
	var lv leaseValue
	if json.Unmarshal(e.Value(), &lv) != nil || lv.Instance != s.opts.ID || lv.Turn != d.turn {
		return 0, false
	}
	return e.Revision(), true
}

// watchCancel cancels the drive when cancel.<conversation> names its turn.
func (s *Service) watchCancel(ctx context.Context, d *drive) {
	w, err := s.turns.Watch(ctx, cancelKey(d.conv))
	if err != nil {
		s.log.Warn("chat: cannot watch for cancellation", "conversation", d.conv, "err", err)
		return
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			var cv cancelValue
			if json.Unmarshal(e.Value(), &cv) == nil && cv.Turn == d.turn {
				d.cancel()
				return
			}
		}
	}
}

func (s *Service) clearCancel(d *drive) {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultRequestTimeout)
	defer cancel()
	e, err := s.turns.Get(ctx, cancelKey(d.conv))
	if err != nil {
		return
	}
	var cv cancelValue
	if json.Unmarshal(e.Value(), &cv) == nil && cv.Turn == d.turn {
		_ = s.turns.Purge(ctx, cancelKey(d.conv), jetstream.LastRevision(e.Revision()))
	}
}

// stopTurns stops every drive without ending its turn.
func (s *Service) stopTurns() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.running {
		d.stop(errStopping)
	}
}

// Cancel asks the conversation's running turn to end and waits (within
// ctx) for its turn_end. No turn running is not an error: Done is nil. Only
// the conversation's owner may.
func (s *Service) Cancel(ctx context.Context, req model.ChatCancelRequest) (model.ChatCancelReply, error) {
	if e := req.Validate(); e != nil {
		return model.ChatCancelReply{}, e
	}
	owner, _, err := s.access(ctx, req.Conversation, useAct)
	if err != nil {
		return model.ChatCancelReply{}, err
	}
	reply, err := s.cancel(ctx, req)
	if err == nil && reply.Turn != "" {
		// A cancel with no turn running changed nothing (a revoked key's
		// gateway asks it of every conversation of the key).
		s.audit(ctx, model.ChatAuditCancel, req.Conversation, owner, reply.Turn, false)
	}
	return reply, err
}

// cancel is Cancel without the owner's check (Delete's).
func (s *Service) cancel(ctx context.Context, req model.ChatCancelRequest) (model.ChatCancelReply, error) {
	if e := req.Validate(); e != nil {
		return model.ChatCancelReply{}, e
	}
	reply := model.ChatCancelReply{Conversation: req.Conversation}
	if _, err := s.convs.Read(ctx, req.Conversation); err != nil {
		return reply, err
	}
	e, err := s.turns.Get(ctx, leaseKey(req.Conversation))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return reply, nil
	}
	if err != nil {
		return reply, apierr.Wrap(apierr.ServiceUnavailable, "reading the lease of conversation "+req.Conversation, err)
	}
	var lv leaseValue
	if json.Unmarshal(e.Value(), &lv) != nil || lv.Turn == "" {
		return reply, apierr.Newf(apierr.Conflict, "conversation %s has a turn starting: cancel again in a moment", req.Conversation)
	}
	if req.Turn != "" && req.Turn != lv.Turn {
		return reply, apierr.Newf(apierr.Conflict, "turn %s is not running in conversation %s (turn %s is)", req.Turn, req.Conversation, lv.Turn)
	}
	reply.Turn = lv.Turn
	val, _ := json.Marshal(cancelValue{Turn: lv.Turn, At: time.Now().UTC()})
	if _, err := s.turns.Put(ctx, cancelKey(req.Conversation), val); err != nil {
		return reply, apierr.Wrap(apierr.ServiceUnavailable, "asking for the cancellation", err)
	}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		entries, err := s.convs.Read(ctx, req.Conversation)
		if err == nil {
			if done := turnEnd(entries, lv.Turn); done != nil {
				reply.Done = done
				return reply, nil
			}
		}
		select {
		case <-ctx.Done():
			return reply, apierr.Newf(apierr.ServiceUnavailable, "the cancellation of turn %s is asked but the turn has not ended yet", lv.Turn)
		case <-t.C:
		}
	}
}

// scan resumes the turns whose instance died, until ctx ends.
func (s *Service) scan(ctx context.Context) {
	type sighting struct {
		rev uint64
		at  time.Time
	}
	seen := map[string]sighting{}
	t := time.NewTicker(s.opts.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c, cancel := context.WithTimeout(ctx, s.opts.LeaseTTL)
		lister, err := s.turns.ListKeysFiltered(c, leasePrefix+"*")
		if err != nil {
			cancel()
			if !errors.Is(err, jetstream.ErrNoKeysFound) && ctx.Err() == nil {
				s.log.Debug("chat: listing leases failed", "err", err)
			}
			continue
		}
		now := time.Now()
		present := map[string]bool{}
		for key := range lister.Keys() {
			conv := strings.TrimPrefix(key, leasePrefix)
			present[conv] = true
			if s.drives(conv) {
				delete(seen, conv)
				continue
			}
			e, err := s.turns.Get(c, key)
			if err != nil {
				continue
			}
			if released(e) {
				// Missed by watchReleased (its watch was down): taken now.
				delete(seen, conv)
				s.takeover(c, conv, e.Revision())
				continue
			}
			sg, ok := seen[conv]
			if !ok || sg.rev != e.Revision() {
				seen[conv] = sighting{rev: e.Revision(), at: now}
				continue
			}
			if now.Sub(sg.at) >= s.opts.LeaseTTL {
				delete(seen, conv)
				s.takeover(c, conv, e.Revision())
			}
		}
		cancel()
		for conv := range seen {
			if !present[conv] {
				delete(seen, conv)
			}
		}
	}
}

// released reports whether a lease entry is one its instance released on
// stopping.
func released(e jetstream.KeyValueEntry) bool {
	var lv leaseValue
	return e.Operation() == jetstream.KeyValuePut && json.Unmarshal(e.Value(), &lv) == nil && lv.Released
}

// watchReleased takes over each lease released by a stopping instance as
// soon as it sees it, until ctx ends: those there when it starts (this
// instance restarted) and those released later. scan takes them too, within
// a third of the TTL, should the watch be down.
func (s *Service) watchReleased(ctx context.Context) {
	for ctx.Err() == nil {
		w, err := s.turns.Watch(ctx, leasePrefix+"*")
		if err != nil {
			s.log.Debug("chat: cannot watch the leases", "err", err)
		} else {
			s.takeReleased(ctx, w)
			_ = w.Stop()
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// takeReleased takes over the released leases w reports until ctx ends or w does.
func (s *Service) takeReleased(ctx context.Context, w jetstream.KeyWatcher) {
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil || !released(e) {
				continue
			}
			conv := strings.TrimPrefix(e.Key(), leasePrefix)
			if s.drives(conv) {
				continue
			}
			c, cancel := context.WithTimeout(ctx, s.opts.LeaseTTL)
			s.takeover(c, conv, e.Revision())
			cancel()
		}
	}
}

func (s *Service) drives(conv string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.running[conv]
	return ok
}

// takeover swaps a lapsed lease for this instance's and resumes its turn.
func (s *Service) takeover(ctx context.Context, conv string, rev uint64) {
	entries, err := s.convs.Read(ctx, conv)
	if err != nil && apierr.Of(err) != apierr.NotFound {
		return
	}
	var turn string
	if n := len(entries); n > 0 {
		turn = entries[n-1].Turn
	}
	newRev, err := s.putLease(ctx, conv, turn, rev)
	if err != nil {
		return // another instance was first
	}
	d := &drive{conv: conv, rev: newRev}
	if len(entries) == 0 || turnEnd(entries, turn) != nil {
		s.release(d) // nothing left to do: the turn ended, or never began
		return
	}
	name := loop.LastProfile(entries)
	p, err := s.profiles.Get(ctx, name)
	if err != nil {
		s.log.Warn("chat: cannot resume a turn: its profile is unreadable", "conversation", conv, "profile", name, "err", err)
		s.endTurn(ctx, conv, entries, model.ChatDone{Reason: model.TurnError,
			Message: fmt.Sprintf("The turn could not be resumed: profile %s: %s", name, apierr.From(err).Message)})
		s.release(d)
		return
	}
	s.log.Info("chat: resuming a turn whose instance stopped", "conversation", conv, "turn", turn)
	s.start(context.Background(), d, turn, func(ctx context.Context) (model.ChatDone, error) { return s.engine.Resume(ctx, conv, p) })
}

// endCancelled ends a cancelled turn the loop left without a turn_end (the
// cancellation came before it could read the log); it reports whether the
// turn has its end now.
func (s *Service) endCancelled(d *drive) bool {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultRequestTimeout)
	defer cancel()
	entries, err := s.convs.Read(ctx, d.conv)
	if err != nil || len(entries) == 0 || entries[len(entries)-1].Turn != d.turn {
		return false
	}
	if turnEnd(entries, d.turn) != nil {
		return true
	}
	return s.endTurn(ctx, d.conv, entries, model.ChatDone{Reason: model.TurnCancelled, Message: "The turn was cancelled."})
}

// endTurn appends a turn_end to the conversation's last turn.
func (s *Service) endTurn(ctx context.Context, conv string, entries []model.ChatEntry, done model.ChatDone) bool {
	last := entries[len(entries)-1]
	payload, _ := json.Marshal(done)
	if _, err := s.convs.Append(ctx, conv, model.ChatEntry{Seq: last.Seq + 1, Kind: model.EntryTurnEnd, Turn: last.Turn, Payload: payload}); err != nil {
		s.log.Warn("chat: ending a turn failed", "conversation", conv, "err", err)
		return false
	}
	s.events.Publish(model.ChatEvent{Kind: model.ChatEventDone, Conversation: conv, Turn: last.Turn, Done: &done, At: time.Now().UTC()})
	return true
}
