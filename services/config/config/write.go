package config

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// plan is one checked config write: what to store, the secrets to hand to the
// credential service, and what it replaces.
type plan struct {
	cfg model.McpConfig
	// sealed are the secrets, sealed to the credential service (passed on
	// as they came); names says what they hold.
	sealed  model.SealedSecrets
	secrets model.SecretNames
	// prev is the current record (nil for a new or deleted config); lastRev
	// the revision the key must still have (0: the key must not exist).
	prev    *model.McpConfig
	lastRev uint64
	// stored describes the secrets held before (nil when not asked).
	stored *model.CredDescription
}

// prepare normalises cfg, moves its secrets out and checks it, writing
// nothing. credID, when set, names an existing record whose stored secrets
// count for the required check (updates, rollbacks). Secrets come sealed;
// any value in clear (given, or left in cfg) is refused.
func (s *Service) prepare(ctx context.Context, cfg model.McpConfig, given *model.Credentials, sealed model.SealedSecrets, credID string) (*plan, error) {
	cfg.Normalize()
	if err := refuseClear(&cfg, given, s.subj.Service("cred", "key")); err != nil {
		return nil, err
	}
	secrets, serr := sealedNames(&cfg, sealed)
	if serr != nil {
		return nil, serr
	}
	if cfg.AuthType == model.AuthNone && !secrets.Empty() {
		cfg.AuthType = model.AuthAPIKey
		if secrets.OAuth != nil {
			cfg.AuthType = model.AuthOAuth
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := model.RefuseInlineSecrets(&cfg); err != nil {
		return nil, err
	}
	if err := s.checkRunnerPolicies(ctx, &cfg); err != nil {
		return nil, err
	}
	if s.opts.CheckKeyfiles {
		if err := checkKeyfiles(&cfg); err != nil {
			return nil, err
		}
	}
	p := &plan{cfg: cfg, sealed: sealed, secrets: secrets}
	if credID != "" && (needsStored(&cfg, secrets) || !secrets.Empty()) {
		stored, err := s.credDescribe(ctx, credID)
		if err != nil {
			return nil, err
		}
		p.stored = stored
	}
	if err := missingSecret(&p.cfg, secrets, p.stored); err != nil {
		return nil, err
	}
	if !secrets.Empty() {
		// The credential service opens and checks them now, so that a blob
		// it cannot open (or a bad value) stops the write before anything,
		// and an import before its first server.
		if err := s.credSet(ctx, p.cfg.ID, sealed, true); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// commit writes a plan in the order that leaves nothing half-written:
// reserve the slug → store the secrets → compare-and-set the config. It
// returns the undo of what it wrote: on an error the caller must run it
// (undoWrites) to take back the steps made; on success it is the undo of the
// whole write, for an import that fails later. finish releases the old slug
// of a rename, once nothing will be undone.
func (s *Service) commit(ctx context.Context, p *plan) (u *undo, finish func(context.Context), err error) {
	id, slug := p.cfg.ID, p.cfg.Slug
	u = &undo{p: p}
	undoSlug, err := s.reserveSlug(ctx, slug, id, p.prev != nil && p.prev.Slug == slug)
	if err != nil {
		return u, nil, err
	}
	u.slug = undoSlug
	if !p.secrets.Empty() {
		// The undo counts from the request: a set whose reply was lost may
		// have stored part of it, and the undo removes what was new.
		u.creds = func(ctx context.Context) { s.dropSecrets(ctx, p) }
		if err := s.credSet(ctx, id, p.sealed, false); err != nil {
			return u, nil, err
		}
	}
	if err := s.write(ctx, &p.cfg, p.lastRev); err != nil {
		return u, nil, err
	}
	written := p.cfg.Revision
	u.config = func(ctx context.Context) error { return s.restore(ctx, p, written) }
	finish = func(ctx context.Context) {
		if p.prev != nil && p.prev.Slug != slug {
			s.freeSlug(ctx, p.prev.Slug, id)
		}
	}
	return u, finish, nil
}

// commitOne is commit for a request of one write: what a failed commit made
// is undone before it returns.
func (s *Service) commitOne(ctx context.Context, end time.Time, p *plan) (finish func(context.Context), err error) {
	u, finish, err := s.commit(ctx, p)
	if err != nil {
		s.undoWrites(ctx, end, []*undo{u})
		return nil, err
	}
	return finish, nil
}

// undo takes back a write, or the part of it that was made (nil steps were
// not).
type undo struct {
	p *plan
	// config puts back what the write replaced; errChangedSince when
	// someone changed the config since (theirs stands).
	config func(context.Context) error
	slug   func(context.Context)
	creds  func(context.Context)
}

// errChangedSince: an undo found the config changed by someone else.
var errChangedSince = errors.New("the config changed since")

const (
	// undoStepTimeout bounds one step of an undo (a KV write), so that
	// every undo has its own budget, not what an earlier one left.
	undoStepTimeout = 5 * time.Second
	// undoReserve is the end of a writing request kept to undo it.
	undoReserve = 5 * time.Second
	// credUndoWait is how long the answer waits for the removal of
	// secrets an undo asked for; it goes on, bounded by RequestTimeout.
	credUndoWait = 2 * time.Second
)

// writeCtx bounds a writing request: its work ends undoReserve (at most half
// of OpTimeout) before OpTimeout, which is left to undo a failure, so a
// failed write is undone and answered within OpTimeout. end is that limit.
func (s *Service) writeCtx(ctx context.Context) (work context.Context, end time.Time, cancel context.CancelFunc) {
	end = time.Now().Add(s.opts.OpTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(end) {
		end = d
	}
	work, cancel = context.WithDeadline(ctx, end.Add(-min(undoReserve, s.opts.OpTimeout/2)))
	return work, end, cancel
}

// undoWrites takes back writes, the latest first, and returns the slugs of
// the configs that stay written because putting them back failed. The steps
// in the service's own KV come first, each on its own budget (undoStepTimeout,
// detached from the request, ending at end at the latest): the config (so no
// runner starts it), then its slug reservation. A config that stays keeps its
// slug and secrets, and so does one changed by someone else since. The
// secrets' removal asks the credential service, which may be what failed:
// the removals run together after the KV steps, the answer waits for them
// credUndoWait at most, and each goes on within RequestTimeout. A secret left
// behind belongs to a config that is not stored (logged).
func (s *Service) undoWrites(ctx context.Context, end time.Time, us []*undo) (stayed []string) {
	base := context.WithoutCancel(ctx)
	step := func(f func(context.Context) error) error {
		d := time.Now().Add(undoStepTimeout)
		if end.Before(d) {
			d = end
		}
		sctx, cancel := context.WithDeadline(base, d)
		defer cancel()
		return f(sctx)
	}
	var creds []func(context.Context)
	for i := len(us) - 1; i >= 0; i-- {
		u := us[i]
		if u.config != nil {
			if err := step(u.config); err != nil {
				if !errors.Is(err, errChangedSince) {
					stayed = append(stayed, u.p.cfg.Slug)
				}
				continue
			}
		}
		if u.slug != nil {
			_ = step(func(ctx context.Context) error { u.slug(ctx); return nil })
		}
		if u.creds != nil {
			creds = append(creds, u.creds)
		}
	}
	if len(creds) == 0 {
		return stayed
	}
	var wg sync.WaitGroup
	for _, f := range creds {
		wg.Add(1)
		s.inflight.Add(1) // the request holds one: Run waits for these too
		go func() {
			defer s.inflight.Done()
			defer wg.Done()
			cctx, cancel := context.WithTimeout(base, s.opts.RequestTimeout)
			defer cancel()
			f(cctx)
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	wait := time.NewTimer(max(0, min(credUndoWait, time.Until(end))))
	defer wait.Stop()
	select {
	case <-done:
	case <-wait.C:
	}
	return stayed
}

// dropSecrets deletes the secrets a plan added (all of a new config's;
// those an update introduced). Values it overwrote cannot be restored: the
// config service never reads secrets back.
func (s *Service) dropSecrets(ctx context.Context, p *plan) {
	var names []string
	if p.prev != nil || p.stored != nil {
		if names = newSecretNames(p.secrets, p.stored); len(names) == 0 {
			return
		}
	}
	if err := s.credDelete(ctx, p.cfg.ID, names); err != nil {
		s.log.Warn("removing secrets after a failed write failed", "server", p.cfg.Slug, "id", p.cfg.ID, "error", err)
	}
}

// restore puts back what a committed plan replaced, unless someone changed
// the config since (then their change stands: errChangedSince).
func (s *Service) restore(ctx context.Context, p *plan, written uint64) error {
	var err error
	if p.prev == nil {
		err = s.assets.Configs.Delete(ctx, p.cfg.ID, jetstream.LastRevision(written))
	} else {
		prev := *p.prev
		prev.Version = p.cfg.Version + 1 // the undo is the next entry
		data, encErr := encodeConfig(&prev)
		if encErr != nil {
			err = encErr
		} else {
			_, err = s.assets.Configs.Update(ctx, prev.ID, data, written)
		}
	}
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		s.log.Warn("not undoing a config write: it changed since", "server", p.cfg.Slug, "id", p.cfg.ID)
		return errChangedSince
	}
	if err != nil {
		s.log.Error("undoing a config write failed: it stays written", "server", p.cfg.Slug, "id", p.cfg.ID, "error", err)
	}
	return err
}

// prefixed names an import entry in a validation error's field.
func prefixed(err error, prefix string) error {
	e := apierr.From(err)
	if e.Code != apierr.Validation && e.Code != apierr.Conflict {
		return err
	}
	field := prefix
	if e.Field != "" {
		field += "." + e.Field
	}
	return e.WithField(field)
}
