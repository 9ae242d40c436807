package chat

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
)

// Every conversation's log is in one stream, MCP_CHAT, which refuses
// appends once full, for everyone. So each principal's conversations may
// hold at most Options.PrincipalQuotaMiB of it: the bytes charged to a
// principal are kept under usage.<hash of the principal> in
// bus.BucketChatTurns, and each conversation's owner record says how much
// of it is charged. A send charges the conversation's growth since its
// last charge and the message it adds, and is refused (RATE_LIMITED) past
// the quota; the end of a turn charges what the turn appended; a delete
// gives back what was charged. The operator's conversations are not
// charged, nor those stored before owners.

const usagePrefix = "usage."

// entryOverhead is what an entry takes in the log beyond its payload (its
// other fields, the message's subject and headers), roughly.
const entryOverhead = 256

func usageKey(p string) string {
	sum := sha256.Sum256([]byte(p))
	return usagePrefix + hex.EncodeToString(sum[:16])
}

// logSize is roughly what entries take in the log.
func logSize(entries []model.ChatEntry) int64 {
	var n int64
	for _, e := range entries {
		n += int64(len(e.Payload)) + entryOverhead
	}
	return n
}

// sendSize is roughly what a send appends before its turn runs.
func sendSize(req model.ChatSendRequest) int64 {
	n := int64(len(req.Message)) + entryOverhead
	for _, m := range req.Context {
		b, _ := json.Marshal(m)
		n += int64(len(b)) + entryOverhead
	}
	return n
}

func (s *Service) quota() int64 { return int64(s.opts.PrincipalQuotaMiB) << 20 }

// overQuota refuses a send of p that would add adding bytes before
// anything is claimed (so refused sends squat no ids), when p's
// conversations hold too much already.
func (s *Service) overQuota(ctx context.Context, p principal.Principal, adding int64) error {
	if s.quota() <= 0 || p.Kind == principal.KindOperator {
		return nil
	}
	used, _, err := s.usage(ctx, p.ID)
	if err != nil {
		return err
	}
	if used+adding > s.quota() {
		return s.quotaErr(used)
	}
	return nil
}

func (s *Service) quotaErr(used int64) error {
	return apierr.Newf(apierr.RateLimited, "your conversations hold %d MiB of the chat log, at most %d MiB each user may (--chat-principal-quota): delete some (DELETE /api/v1/chat/conversations/{id}) to go on",
		used>>20, s.opts.PrincipalQuotaMiB).WithField(model.ChatQuotaField)
}

// charge brings what conv's owner is charged for it to size+adding (its
// log's size and what a send is about to append), refusing a send
// (adding > 0) that would take the owner past the quota. The caller holds
// conv's lease.
func (s *Service) charge(ctx context.Context, conv string, size, adding int64) error {
	if s.quota() <= 0 {
		return nil
	}
	e, err := s.turns.Get(ctx, ownerKey(conv))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil // stored before owners
	}
	if err != nil {
		return apierr.Wrap(apierr.ServiceUnavailable, "reading the owner of conversation "+conv, err)
	}
	var v ownerValue
	if json.Unmarshal(e.Value(), &v) != nil || v.Principal == "" || v.Principal == principal.Operator().ID {
		return nil
	}
	if v.Refunded && adding == 0 {
		// The end of a turn its conversation's delete cancelled: the
		// delete gave the charge back and removes the log.
		return nil
	}
	delta := size + adding - v.Charged
	if delta == 0 {
		return nil
	}
	limit := int64(-1)
	if adding > 0 {
		limit = s.quota()
	}
	if err := s.addUsage(ctx, v.Principal, delta, limit); err != nil {
		return err
	}
	v.Charged, v.Refunded = size+adding, false
	val, _ := json.Marshal(v)
	// Compare-and-set: a delete meanwhile (the record refunded or purged)
	// stays deleted. The owner is then not charged for it either: what
	// the record does not say is charged is never given back.
	if _, err := s.turns.Update(ctx, ownerKey(conv), val, e.Revision()); err != nil {
		s.log.Warn("chat: recording a conversation's charge failed; it is undone", "conversation", conv, "err", err)
		if err := s.addUsage(context.WithoutCancel(ctx), v.Principal, -delta, -1); err != nil {
			s.log.Warn("chat: undoing a conversation's charge failed", "conversation", conv, "err", err)
		}
	}
	return nil
}

// refund gives back what conv's owner was charged for it (its delete),
// once: the owner record says so first (compare-and-set), so deletes that
// race, or one tried again after a failure, do not give it back twice.
func (s *Service) refund(ctx context.Context, conv string) {
	for range 8 {
		e, err := s.turns.Get(ctx, ownerKey(conv))
		if err != nil {
			return // none (stored before owners, or deleted), or unreadable: nothing to give back
		}
		var v ownerValue
		if json.Unmarshal(e.Value(), &v) != nil || v.Principal == "" || v.Refunded {
			return
		}
		charged := v.Charged
		v.Charged, v.Refunded = 0, true
		val, _ := json.Marshal(v)
		if _, err := s.turns.Update(ctx, ownerKey(conv), val, e.Revision()); err != nil {
			if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
				continue // charged or refunded meanwhile: read it again
			}
			s.log.Warn("chat: giving back a deleted conversation's charge failed", "conversation", conv, "err", err)
			return
		}
		if charged != 0 {
			if err := s.addUsage(ctx, v.Principal, -charged, -1); err != nil {
				s.log.Warn("chat: giving back a deleted conversation's charge failed", "conversation", conv, "err", err)
			}
		}
		return
	}
	s.log.Warn("chat: giving back a deleted conversation's charge failed: its record kept changing", "conversation", conv)
}

// usage is what p is charged, and the record's revision (0: none yet).
func (s *Service) usage(ctx context.Context, p string) (int64, uint64, error) {
	e, err := s.turns.Get(ctx, usageKey(p))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, apierr.Wrap(apierr.ServiceUnavailable, "reading a principal's chat usage", err)
	}
	n, err := strconv.ParseInt(string(e.Value()), 10, 64)
	if err != nil {
		return 0, e.Revision(), nil // unreadable: counted afresh
	}
	return n, e.Revision(), nil
}

// addUsage adds delta to p's charge (never below 0) with compare-and-set,
// refusing growth past limit (>= 0).
func (s *Service) addUsage(ctx context.Context, p string, delta, limit int64) error {
	// This instance's charges of one principal take turns (a /v1 key's
	// concurrent requests would otherwise race each other for the one
	// counter); the compare-and-set settles races with other instances.
	mu := &s.usageLocks[usageStripe(p)]
	mu.Lock()
	defer mu.Unlock()
	for try := range 24 {
		if try > 0 {
			// Many turns of one principal at once race for the one counter:
			// spread the retries out instead of colliding again at once.
			select {
			case <-ctx.Done():
				return apierr.Wrap(apierr.Network, "recording a principal's chat usage", ctx.Err())
			case <-time.After(time.Duration(rand.IntN(1<<min(try, 6))+1) * time.Millisecond):
			}
		}
		used, rev, err := s.usage(ctx, p)
		if err != nil {
			return err
		}
		next := max(used+delta, 0)
		if limit >= 0 && delta > 0 && next > limit {
			return s.quotaErr(used)
		}
		val := []byte(strconv.FormatInt(next, 10))
		if rev == 0 {
			_, err = s.turns.Create(ctx, usageKey(p), val)
		} else {
			_, err = s.turns.Update(ctx, usageKey(p), val, rev)
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return apierr.Wrap(apierr.ServiceUnavailable, "recording a principal's chat usage", err)
		}
	}
	return apierr.New(apierr.Conflict, fmt.Sprintf("chat usage of %s is changing too fast", p))
}

// usageStripes is how many locks Service.usageLocks has.
const usageStripes = 64

// usageStripe picks p's lock among Service.usageLocks.
func usageStripe(p string) int {
	h := sha256.Sum256([]byte(p))
	return int(h[0]) % usageStripes
}

// chargeTurn charges what a turn appended, at its end (its lease held).
func (s *Service) chargeTurn(conv string) {
	if s.quota() <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), DefaultRequestTimeout)
	defer cancel()
	entries, err := s.convs.Read(ctx, conv)
	if err == nil {
		err = s.charge(ctx, conv, logSize(entries), 0)
	}
	if err != nil {
		s.log.Warn("chat: charging a turn's log failed", "conversation", conv, "err", err)
	}
}
