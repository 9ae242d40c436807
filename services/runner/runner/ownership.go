package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// Ownership: every enabled server is owned by exactly one runner (or by
// runtime.replicas runners, which share its calls through the queue group).
// An owner holds a lease, the key server.<slug>.<replica> of KV mcp_owners,
// and renews it; the bucket's TTL ends the lease of a runner that died, and
// another runner takes the server over. Runners also keep a heartbeat key,
// runner.<id>, so that each can take its fair share and no more.

const (
	leasePrefix = model.LeaseKeyPrefix
	beatPrefix  = "runner."
)

// lease is one held ownership key.
type lease struct {
	key     string
	replica int
	rev     uint64
	since   time.Time // when it was taken
	renewed time.Time
}

// runnerBeat is the value of a runner's heartbeat key. Policy is the
// runner's exec policy: the others leave it the servers it refuses.
// Running (the slots taken) and MaxServers (its --max-servers) say whether
// it has room: a full runner leaves new servers to one that has.
type runnerBeat struct {
	Runner     string            `json:"runner"`
	Leases     int               `json:"leases"`
	Running    int64             `json:"running"`
	MaxServers int               `json:"max_servers,omitempty"`
	At         time.Time         `json:"at"`
	Policy     *model.ExecPolicy `json:"policy,omitempty"`
}

// ownerEntry is what a runner keeps of a key of KV mcp_owners: whose lease
// or heartbeat it is, and a heartbeat's policy (nil from runners that
// publish none: they are taken to accept everything) and room (a
// MaxServers of 0, from runners that publish none: taken to have room).
type ownerEntry struct {
	Runner     string            `json:"runner"`
	Policy     *model.ExecPolicy `json:"policy,omitempty"`
	Running    int64             `json:"running,omitempty"`
	MaxServers int               `json:"max_servers,omitempty"`
}

func leaseKey(slug string, replica int) string {
	return fmt.Sprintf("%s%s.%d", leasePrefix, slug, replica)
}

func replicasOf(cfg *model.McpConfig) int {
	if cfg.Runtime.Replicas > 1 {
		return cfg.Runtime.Replicas
	}
	return 1
}

// kick asks for an ownership pass now rather than at the next tick.
func (r *Runner) kick() {
	select {
	case r.kickCh <- struct{}{}:
	default:
	}
}

// own renews leases (renew.go) and acquires and rebalances them until ctx
// ends. Renewals keep their own loop: a slow acquisition or heartbeat (a
// stream electing a leader, a starved CPU) must not hold them past the lease.
func (r *Runner) own(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { r.renewLoop(ctx) })
	defer wg.Wait()
	t := time.NewTicker(r.opts.LeaseTTL / 3)
	defer t.Stop()
	for {
		r.ownPass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.kickCh:
		}
	}
}

func (r *Runner) ownPass(ctx context.Context) {
	if r.natsAway.Load() {
		return // renewals got no answer: taking more would only wait out more timeouts
	}
	var wg sync.WaitGroup
	wg.Go(func() { r.heartbeat(ctx) }) // beside the takeover, not before it
	r.handOverRefused(ctx)
	r.handOverWaiting(ctx)
	r.acquire(ctx)
	r.rebalance(ctx)
	wg.Wait()
}

// ownersKV is the owners bucket with its writes retried through a leader
// election (bus.RetryKV), each within the deadline its caller gives: the
// lease's own end for a renewal, a lease period for a take or a heartbeat.
func (r *Runner) ownersKV() jetstream.KeyValue { return bus.RetryKV(r.assets.Owners) }

// heartbeat announces this runner and its load.
func (r *Runner) heartbeat(ctx context.Context) {
	r.mu.Lock()
	policy := r.execPolicy()
	beat := runnerBeat{Runner: r.opts.ID, Leases: len(r.leases), Running: r.running.Load(), MaxServers: r.opts.MaxServers, At: time.Now().UTC(), Policy: &policy}
	r.mu.Unlock()
	val, _ := json.Marshal(beat)
	c, cancel := context.WithTimeout(ctx, r.opts.LeaseTTL)
	defer cancel()
	if _, err := r.ownersKV().Put(c, beatPrefix+r.opts.ID, val); err != nil {
		r.log.Warn("heartbeat failed", "error", err)
	}
}

// fairShare is how many leases a runner may hold: the wanted leases spread
// over the live runners, rounded up.
func (r *Runner) fairShareLocked() int {
	runners := 0
	r.ownersMu.Lock()
	for key := range r.owners {
		if strings.HasPrefix(key, beatPrefix) {
			runners++
		}
	}
	r.ownersMu.Unlock()
	if runners == 0 {
		runners = 1
	}
	wanted := 0
	for _, cfg := range r.desired {
		wanted += min(replicasOf(cfg), runners)
	}
	return (wanted + runners - 1) / runners
}

// placement is what KV mcp_owners says about the other runners: which are
// alive, with which policy and whether with a free slot, how many leases
// each holds and which servers each runs a replica of.
type placement struct {
	live     []string
	policies map[string]*model.ExecPolicy
	full     map[string]bool // runners whose heartbeat shows no free slot
	load     map[string]int
	holders  map[string]map[string]bool // slug → runners holding one of its replicas
}

func (r *Runner) placementNow() placement {
	p := placement{policies: map[string]*model.ExecPolicy{}, full: map[string]bool{}, load: map[string]int{}, holders: map[string]map[string]bool{}}
	r.ownersMu.Lock()
	defer r.ownersMu.Unlock()
	for key, e := range r.owners {
		id := e.Runner
		if runner, ok := strings.CutPrefix(key, beatPrefix); ok {
			p.live = append(p.live, runner)
			p.policies[runner] = e.Policy
			p.full[runner] = e.MaxServers > 0 && e.Running >= int64(e.MaxServers)
			continue
		}
		rest, ok := strings.CutPrefix(key, leasePrefix)
		i := strings.LastIndexByte(rest, '.')
		if !ok || i < 0 {
			continue
		}
		slug := rest[:i]
		p.load[id]++
		if p.holders[slug] == nil {
			p.holders[slug] = map[string]bool{}
		}
		p.holders[slug][id] = true
	}
	return p
}

// roomElsewhere reports whether a live runner other than me, whose policy
// accepts cfg, with a free slot and not yet running a replica of it, is
// below its fair share: it will take a missing replica, or one that me
// hands over. When none is, a missing replica is stranded unless me takes
// it, whatever its own share. A runner at its --max-servers limit does not
// count: it leaves the replica to one with room (mayTake).
func (p placement) roomElsewhere(me string, cfg *model.McpConfig, fair int) bool {
	for _, id := range p.live {
		if id != me && !p.holders[cfg.Slug][id] && p.load[id] < fair && !p.full[id] && p.accepts(id, cfg) {
			return true
		}
	}
	return false
}

// slotElsewhere reports whether a live runner other than me, whose policy
// accepts cfg and not yet running a replica of it, has a free slot by its
// heartbeat: it could start cfg now, whatever its share.
func (p placement) slotElsewhere(me string, cfg *model.McpConfig) bool {
	for _, id := range p.live {
		if id != me && !p.holders[cfg.Slug][id] && !p.full[id] && p.accepts(id, cfg) {
			return true
		}
	}
	return false
}

// acceptedElsewhere reports whether a live runner other than me would launch
// cfg, by the policy it publishes.
func (p placement) acceptedElsewhere(me string, cfg *model.McpConfig) bool {
	for _, id := range p.live {
		if id != me && p.accepts(id, cfg) {
			return true
		}
	}
	return false
}

// accepts reports whether runner id's published policy allows cfg (a runner
// that publishes none is taken to allow everything). A binary named without
// a path is judged by its name only: each runner resolves it on its own PATH.
func (p placement) accepts(id string, cfg *model.McpConfig) bool {
	pol := p.policies[id]
	return pol == nil || pol.Refuse(cfg, id) == nil
}

// acquire takes unowned servers up to this runner's fair share, and beyond it
// a replica no other runner can take (the others run one already or are at
// their share), which would otherwise stay unplaced. Every runner walks the
// servers from its own starting point, so they rarely race for the same key;
// Create decides when they do.
func (r *Runner) acquire(ctx context.Context) {
	r.mu.Lock()
	fair := r.fairShareLocked()
	held := len(r.leases)
	slugs := make([]string, 0, len(r.desired))
	for slug := range r.desired {
		if _, mine := r.leases[slug]; !mine {
			slugs = append(slugs, slug)
		}
	}
	r.mu.Unlock()
	if len(slugs) == 0 {
		return
	}
	sort.Strings(slugs)
	h := fnv.New32a()
	_, _ = h.Write([]byte(r.opts.ID))
	offset := int(h.Sum32() % uint32(len(slugs)))
	place := sync.OnceValue(r.placementNow) // read only when needed
	for i := range slugs {
		slug := slugs[(offset+i)%len(slugs)]
		r.mu.Lock()
		cfg := r.desired[slug]
		r.mu.Unlock()
		if cfg == nil || !r.replicaMissing(slug, cfg) {
			delete(r.stranded, slug)
			continue
		}
		if !r.mayTake(place, cfg) {
			continue
		}
		if held >= fair && !r.strandedLongEnough(place(), cfg, fair) {
			continue
		}
		for replica := 0; replica < replicasOf(cfg); replica++ {
			key := leaseKey(slug, replica)
			r.ownersMu.Lock()
			_, taken := r.owners[key]
			r.ownersMu.Unlock()
			if taken {
				continue
			}
			// The lease counts from before the request: the bucket's TTL
			// starts when the stream stores it, which is no earlier.
			now := time.Now()
			val, _ := json.Marshal(model.Lease{Runner: r.opts.ID, Key: r.opts.IdentityKey, Server: slug, Replica: replica, Since: now.UTC()})
			c, cancel := context.WithTimeout(ctx, r.opts.LeaseTTL)
			rev, err := r.ownersKV().Create(c, key, val)
			cancel()
			if bus.Transient(err) {
				// Unanswered for a whole lease period: the next pass tries
				// again rather than each free lease waiting out its own.
				r.log.Warn("taking a lease unanswered; trying again at the next pass", "server", slug, "error", err)
				return
			}
			if err != nil {
				continue // someone else was faster: next pass
			}
			r.mu.Lock()
			r.leases[slug] = &lease{key: key, replica: replica, rev: rev, since: now.UTC(), renewed: now}
			r.mu.Unlock()
			r.ownersMu.Lock()
			r.owners[key] = ownerEntry{Runner: r.opts.ID}
			r.ownersMu.Unlock()
			if held >= fair {
				r.log.Info("took a replica no other runner can take, above the fair share", "server", slug, "replica", replica, "fair_share", fair)
			} else {
				r.log.Info("took the server", "server", slug, "replica", replica)
			}
			held++
			r.takeServer(cfg)
			break
		}
	}
}

// mayTake reports whether this runner may take a missing replica of cfg now.
// A config its own policy refuses is left to a live runner whose published
// policy accepts it. When none does, this runner takes it, so that the
// server's status says why it does not run (error, VALIDATION_ERROR naming
// the field) instead of nobody owning it; should an accepting runner show up
// (or only now be seen), handOverRefused moves the server there. Room
// counts the same way: a runner at its --max-servers limit leaves the
// replica to one with a free slot, and takes it (to wait for room in error,
// naming max_servers) only when none has; handOverWaiting moves it when
// one has room later.
func (r *Runner) mayTake(place func() placement, cfg *model.McpConfig) bool {
	if r.execPolicy().Refuse(cfg, r.opts.ID) != nil {
		return !place().acceptedElsewhere(r.opts.ID, cfg)
	}
	return !r.atLimit() || !place().slotElsewhere(r.opts.ID, cfg)
}

// atLimit reports whether every one of this runner's --max-servers slots
// is taken.
func (r *Runner) atLimit() bool {
	return r.running.Load() >= int64(r.opts.MaxServers)
}

// handOverRefused gives back the servers this runner holds but its policy
// refuses, when a live runner whose policy accepts them is there to take
// them (it joined, or its policy changed).
func (r *Runner) handOverRefused(ctx context.Context) {
	var refused []*model.McpConfig
	r.mu.Lock()
	for slug := range r.leases {
		if s := r.servers[slug]; s != nil {
			if cfg := s.config(); r.execPolicy().Refuse(cfg, r.opts.ID) != nil {
				refused = append(refused, cfg)
			}
		}
	}
	r.mu.Unlock()
	if len(refused) == 0 {
		return
	}
	p := r.placementNow()
	for _, cfg := range refused {
		if p.acceptedElsewhere(r.opts.ID, cfg) {
			r.log.Info("handing over a server this runner's policy refuses to one that accepts it", "server", cfg.Slug)
			r.releaseServer(ctx, cfg.Slug, model.StateStopped, true)
		}
	}
}

// handOverWaiting gives back the servers waiting here for room (their
// start met this runner's --max-servers limit) when a live runner whose
// policy accepts them has a free slot by its heartbeat. Only after a whole
// lease period of waiting, so that the heartbeats it is judged by are fresh
// and a server moves at most once a period: a runner that took it on a
// stale heartbeat and is full itself hands it on only to one with room, and
// only after waiting there as long.
func (r *Runner) handOverWaiting(ctx context.Context) {
	var waiting []*model.McpConfig
	r.mu.Lock()
	for slug := range r.leases {
		s := r.servers[slug]
		if s == nil || !s.waitingRoom.Load() || s.active.Load() > 0 {
			continue
		}
		if since := s.roomSince.Load(); since == 0 || time.Since(time.Unix(0, since)) < r.opts.LeaseTTL {
			continue
		}
		waiting = append(waiting, s.config())
	}
	r.mu.Unlock()
	if len(waiting) == 0 {
		return
	}
	p := r.placementNow()
	for _, cfg := range waiting {
		if p.slotElsewhere(r.opts.ID, cfg) {
			r.log.Info("handing over a server waiting for room to a runner that has some", "server", cfg.Slug, "max_servers", r.opts.MaxServers)
			r.releaseServer(ctx, cfg.Slug, model.StateStopped, true)
		}
	}
}

// replicaMissing reports whether a replica of slug has no lease.
func (r *Runner) replicaMissing(slug string, cfg *model.McpConfig) bool {
	r.ownersMu.Lock()
	defer r.ownersMu.Unlock()
	for replica := 0; replica < replicasOf(cfg); replica++ {
		if _, taken := r.owners[leaseKey(slug, replica)]; !taken {
			return true
		}
	}
	return false
}

// strandedLongEnough reports whether a runner at its fair share should take
// a missing replica of slug: no other live runner can, and that has been so
// for a whole lease period. This runner's view of the owners bucket lags
// (a runner that just started, leases not seen yet), and taking at once
// on a stale view put a third server on one of three runners with six.
func (r *Runner) strandedLongEnough(p placement, cfg *model.McpConfig, fair int) bool {
	slug := cfg.Slug
	if p.roomElsewhere(r.opts.ID, cfg, fair) {
		delete(r.stranded, slug)
		return false
	}
	since, seen := r.stranded[slug]
	if !seen {
		r.stranded[slug] = time.Now()
		return false
	}
	return time.Since(since) >= r.opts.LeaseTTL
}

// rebalance hands one server over when this runner holds clearly more than
// its share (a runner joined): an idle one first, never one with calls in
// flight, and never one no other runner would take (it would be stranded,
// and taken back here on the next pass).
func (r *Runner) rebalance(ctx context.Context) {
	r.mu.Lock()
	fair := r.fairShareLocked()
	if len(r.leases) <= fair+1 && len(r.leases) <= fair*2 || len(r.leases) <= 1 {
		r.mu.Unlock()
		return
	}
	candidates := make([]*server, 0, len(r.leases))
	for slug := range r.leases {
		if s := r.servers[slug]; s != nil {
			candidates = append(candidates, s)
		}
	}
	r.mu.Unlock()
	p := r.placementNow()
	var pick *server
	for _, s := range candidates {
		if s.active.Load() > 0 || !p.roomElsewhere(r.opts.ID, s.config(), fair) {
			continue
		}
		if pick == nil || s.status().State == model.StateIdle {
			pick = s
		}
	}
	if pick != nil {
		r.log.Info("handing a server over to even the load", "server", pick.slug, "fair_share", fair)
		r.releaseServer(ctx, pick.slug, model.StateStopped, true)
	}
}

// takeServer starts serving a server this runner now owns.
func (r *Runner) takeServer(cfg *model.McpConfig) {
	r.mu.Lock()
	if _, ok := r.servers[cfg.Slug]; ok {
		r.mu.Unlock()
		return
	}
	s := newServer(r, cfg)
	if l := r.leases[cfg.Slug]; l != nil {
		s.leaseEnd.Store(r.leaseEnd(l.renewed))
	}
	r.servers[cfg.Slug] = s
	r.mu.Unlock()
	if err := s.serve(); err != nil {
		r.log.Error("serving server failed", "server", cfg.Slug, "error", err)
		// The status says why, with the code of the error contract: its
		// calls cannot reach it (the bus refused or did not confirm its
		// subscriptions), which another try, here or on another runner,
		// may fix.
		r.releaseServerWith(context.Background(), cfg.Slug, model.StateError,
			apierr.Wrap(apierr.ServiceUnavailable, "the runner could not serve "+cfg.Slug+" on the bus: "+err.Error(), err), false)
		return
	}
	s.post(s.boot)
}

// loseServer stops a server whose lease is gone (someone else may own it now).
// The owners cache forgets the lease too if it still names this runner (set
// by the take), and a pass follows: the watch may never tell of the change
// that cost it (a TTL marker stored while the watch started over after an
// election), and a cache naming this runner as the holder kept everyone,
// this runner included, from taking the server again (three servers
// unowned for over 20 s after a partition healed).
func (r *Runner) loseServer(slug string) {
	r.mu.Lock()
	s := r.servers[slug]
	delete(r.servers, slug)
	l := r.leases[slug]
	delete(r.leases, slug)
	// Other runners tell the agents of the server meanwhile: a status
	// taken again is news, though the same as this runner's last.
	delete(r.agentStatus, slug)
	r.mu.Unlock()
	if l != nil {
		r.ownersMu.Lock()
		if e, ok := r.owners[l.key]; ok && e.Runner == r.opts.ID {
			delete(r.owners, l.key)
		}
		r.ownersMu.Unlock()
		r.kick()
	}
	r.secrets.forget(slug)
	if s != nil {
		s.lost.Store(true)
		s.close(model.StateStopped, true)
	}
}

// releaseServer stops a server and gives its lease back at once, so another
// runner takes it without waiting for the TTL.
func (r *Runner) releaseServer(ctx context.Context, slug, final string, keep bool) {
	r.releaseServerWith(ctx, slug, final, nil, keep)
}

// releaseServerWith is releaseServer whose final status carries e (the
// error contract: code, message, field), in one write.
func (r *Runner) releaseServerWith(ctx context.Context, slug, final string, e *apierr.Error, keep bool) {
	r.mu.Lock()
	s := r.servers[slug]
	delete(r.servers, slug)
	l := r.leases[slug]
	delete(r.leases, slug)
	// Other runners tell the agents of the server meanwhile: a status
	// taken again is news, though the same as this runner's last.
	delete(r.agentStatus, slug)
	r.mu.Unlock()
	r.secrets.forget(slug)
	if s != nil {
		s.closeWith(final, e, keep)
	}
	if l != nil {
		c, cancel := context.WithTimeout(ctx, r.opts.LeaseTTL)
		_ = r.ownersKV().Delete(c, l.key, jetstream.LastRevision(l.rev))
		cancel()
	}
}

// releaseAll hands every server over (graceful shutdown) and removes the heartbeat.
func (r *Runner) releaseAll() {
	r.mu.Lock()
	slugs := make([]string, 0, len(r.leases))
	for slug := range r.leases {
		slugs = append(slugs, slug)
	}
	r.mu.Unlock()
	done := make(chan struct{}, len(slugs))
	for _, slug := range slugs {
		go func() {
			r.releaseServer(context.Background(), slug, model.StateStopped, true)
			done <- struct{}{}
		}()
	}
	for range slugs {
		<-done
	}
	c, cancel := context.WithTimeout(context.Background(), r.opts.LeaseTTL)
	defer cancel()
	_ = r.assets.Owners.Delete(c, beatPrefix+r.opts.ID)
}

// watchOwners keeps r.owners (key → runner) current and triggers a pass when
// a lease or a runner goes away, and after each snapshot (leases that lapsed
// while the watch was down are gone from it).
func (r *Runner) watchOwners(ctx context.Context) {
	decode := func(data []byte) (ownerEntry, bool) {
		var v ownerEntry
		_ = json.Unmarshal(data, &v)
		return v, true
	}
	h := followCache(&r.ownersMu, r.owners, decode)
	snapshot, update := h.Snapshot, h.Update
	h.Snapshot = func(entries map[string]jetstream.KeyValueEntry) {
		snapshot(entries)
		r.ownersLoaded.Store(true)
		r.kick()
	}
	h.Update = func(e jetstream.KeyValueEntry) {
		update(e)
		if e.Operation() != jetstream.KeyValuePut {
			r.kick() // a lease or a runner went away: take over
		}
	}
	bus.FollowKV(ctx, r.nc, r.assets.Owners, h, bus.KVFollowOptions{Logger: r.log})
}

// replicasHeld counts the leases of a server across all runners.
func (r *Runner) replicasHeld(slug string) int {
	r.ownersMu.Lock()
	defer r.ownersMu.Unlock()
	n := 0
	prefix := leasePrefix + slug + "."
	for key := range r.owners {
		if strings.HasPrefix(key, prefix) {
			n++
		}
	}
	return n
}

// mayWrite reports whether slug's status and catalog are still this
// runner's to write (a background retry asks before each try): while it
// holds the server; and, once it let go of a server no longer wanted
// (disabled, deleted, renamed), until another runner holds it, so that the
// last writes of a removed server (its catalog and status deleted, or its
// final status) land after a slow first try. A server handed over (still
// wanted) is its new owner's to write from the moment it is let go.
func (r *Runner) mayWrite(slug string) bool {
	r.mu.Lock()
	_, held := r.leases[slug]
	_, wanted := r.desired[slug]
	r.mu.Unlock()
	return held || !wanted && !r.heldElsewhere(slug)
}

// heldElsewhere reports whether another runner holds a lease of slug.
func (r *Runner) heldElsewhere(slug string) bool {
	r.ownersMu.Lock()
	defer r.ownersMu.Unlock()
	prefix := leasePrefix + slug + "."
	for key, e := range r.owners {
		if strings.HasPrefix(key, prefix) && e.Runner != r.opts.ID {
			return true
		}
	}
	return false
}
