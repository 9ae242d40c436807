package config

import (
	"context"
	"errors"

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
// reserve the slug → store the secrets → compare-and-set the config. A
// failing step undoes the earlier ones. It returns undo (the whole write, for
// an import that fails later) and finish (release the old slug of a rename,
// once nothing will be undone).
func (s *Service) commit(ctx context.Context, p *plan) (undo, finish func(context.Context), err error) {
	id, slug := p.cfg.ID, p.cfg.Slug
	undoSlug, err := s.reserveSlug(ctx, slug, id)
	if err != nil {
		return nil, nil, err
	}
	undoCreds := func(context.Context) {}
	if !p.secrets.Empty() {
		if err := s.credSet(ctx, id, p.sealed, false); err != nil {
			uctx, cancel := detached(ctx)
			defer cancel()
			// A partial set is possible when the reply was lost: remove what was new.
			s.dropSecrets(uctx, p)
			undoSlug(uctx)
			return nil, nil, err
		}
		undoCreds = func(ctx context.Context) { s.dropSecrets(ctx, p) }
	}
	if err := s.write(ctx, &p.cfg, p.lastRev); err != nil {
		uctx, cancel := detached(ctx)
		defer cancel()
		undoCreds(uctx)
		undoSlug(uctx)
		return nil, nil, err
	}
	written := p.cfg.Revision
	undo = func(ctx context.Context) {
		s.restore(ctx, p, written)
		undoCreds(ctx)
		undoSlug(ctx)
	}
	finish = func(ctx context.Context) {
		if p.prev != nil && p.prev.Slug != slug {
			s.freeSlug(ctx, p.prev.Slug, id)
		}
	}
	return undo, finish, nil
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
// the config since (then their change stands).
func (s *Service) restore(ctx context.Context, p *plan, written uint64) {
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
		return
	}
	if err != nil {
		s.log.Error("undoing a config write failed", "server", p.cfg.Slug, "id", p.cfg.ID, "error", err)
	}
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
