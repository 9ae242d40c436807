package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/model"
)

// renewLoop renews every held lease each LeaseTTL/3 until ctx ends, and
// tells the ownership pass whether NATS answered (r.natsAway). When renewals
// are answered again after a round that got none, it asks for a pass at once:
// the leases freed meanwhile are taken as soon as the bucket answers.
func (r *Runner) renewLoop(ctx context.Context) {
	t := time.NewTicker(r.opts.LeaseTTL / 3)
	defer t.Stop()
	for {
		answered := r.renewLeases(ctx)
		if wasAway := r.natsAway.Swap(!answered); wasAway && answered {
			r.kick()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// expireLeases gives up every lease not renewed for a whole TTL, whatever the
// ownership loop is waiting for; the maintenance tick calls it.
func (r *Runner) expireLeases() {
	r.mu.Lock()
	var stale []string
	for slug, l := range r.leases {
		if time.Since(l.renewed) >= r.opts.LeaseTTL {
			stale = append(stale, slug)
		}
	}
	r.mu.Unlock()
	for _, slug := range stale {
		r.log.Warn("lease expired unrenewed: stopping the server here", "server", slug)
		r.awayStops.Store(true)
		r.loseServer(slug)
	}
}

// renewLeases refreshes every held lease. A lease another runner holds now,
// or one that could not be renewed for a whole TTL (NATS unreachable), is
// given up: the server stops here, so two owners never run together for
// longer than the lease.
// It reports whether NATS answered: every renewal, or at least one of them
// (a loaded JetStream answers some renewals late; a runner that took no
// lease while any one failed kept servers unowned long after an election).
func (r *Runner) renewLeases(ctx context.Context) bool {
	r.mu.Lock()
	held := make(map[string]lease, len(r.leases))
	for slug, l := range r.leases {
		held[slug] = *l
	}
	r.mu.Unlock()
	// In parallel: with NATS away every renewal waits out its lease, and
	// one after another they would keep servers here past it.
	var wg sync.WaitGroup
	var answered atomic.Int32
	for slug, l := range held {
		wg.Go(func() {
			if r.renewLease(ctx, slug, l) {
				answered.Add(1)
			}
		})
	}
	wg.Wait()
	return len(held) == 0 || answered.Load() > 0
}

// renewLease renews one lease; false means NATS did not answer. The renewal
// is retried through a leader election (ownersKV) until the lease would end
// anyway, and the renewed lease counts from before the request.
func (r *Runner) renewLease(ctx context.Context, slug string, l lease) bool {
	val, _ := json.Marshal(model.Lease{Runner: r.opts.ID, Key: r.opts.IdentityKey, Server: slug, Replica: l.replica, Since: l.since})
	sent := time.Now()
	c, cancel := context.WithDeadline(ctx, l.renewed.Add(r.opts.LeaseTTL))
	rev, err := r.ownersKV().Update(c, l.key, val, l.rev)
	cancel()
	switch {
	case err == nil:
		r.mu.Lock()
		if cur, ok := r.leases[slug]; ok && cur.key == l.key {
			cur.rev, cur.renewed = rev, sent
			if s := r.servers[slug]; s != nil {
				s.leaseEnd.Store(r.leaseEnd(sent))
			}
		}
		r.mu.Unlock()
		return true
	case errors.Is(err, jetstream.ErrKeyRevisionMismatch) && r.adoptOwnLease(ctx, slug, l, val):
		// An earlier renewal was applied but its answer lost (a leader
		// change): the lease is still ours, one revision on.
		return true
	case errors.Is(err, jetstream.ErrKeyRevisionMismatch), errors.Is(err, jetstream.ErrKeyNotFound),
		errors.Is(err, jetstream.ErrKeyDeleted):
		r.log.Warn("lease lost: handing the server over", "server", slug, "error", err)
		r.loseServer(slug)
		return true
	case time.Since(l.renewed) >= r.opts.LeaseTTL:
		r.log.Warn("lease expired unrenewed: stopping the server here", "server", slug, "error", err)
		r.awayStops.Store(true)
		r.loseServer(slug)
		return false
	default:
		r.log.Warn("lease renewal failed; keeping the server until the lease runs out", "server", slug, "error", err)
		return false
	}
}

// adoptOwnLease takes on the revision of lease l when the bucket holds, at
// a revision after l's, exactly what this runner writes for it (its id, key
// and the lease's start): an earlier renewal of its own, applied but not
// answered. A renewal retried within one request sees to that itself
// (bus.RetryKV); one whose every try went unanswered leaves it to the next
// round, which then met the mismatch and handed a server over that nobody
// else could take until its lease aged out. The lease's renewal time stays
// the last one answered (the write's time is not known), so the next
// renewal, at the adopted revision, counts the lease on.
func (r *Runner) adoptOwnLease(ctx context.Context, slug string, l lease, val []byte) bool {
	c, cancel := context.WithTimeout(ctx, r.opts.LeaseTTL/3)
	defer cancel()
	e, err := r.assets.Owners.Get(c, l.key)
	if err != nil || e.Revision() <= l.rev || !bytes.Equal(e.Value(), val) {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	cur, ok := r.leases[slug]
	if !ok || cur.key != l.key || cur.rev != l.rev {
		return false
	}
	cur.rev = e.Revision()
	r.log.Info("a renewal of this runner's lease was applied unanswered: keeping the server", "server", slug, "revision", cur.rev)
	return true
}

// leaseEnd is when a lease renewed at renewed ends (renewed carries the
// monotonic clock, which wall clock steps do not move).
func (r *Runner) leaseEnd(renewed time.Time) *time.Time {
	end := renewed.Add(r.opts.LeaseTTL)
	return &end
}

// leaseLive reports whether this runner's lease of s has not run out by its
// own clock (the bucket's TTL counts from no earlier than the renewal's
// request, so it has not run out there either).
func (s *server) leaseLive() bool {
	end := s.leaseEnd.Load()
	return end == nil || time.Now().Before(*end)
}
