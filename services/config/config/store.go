package config

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/configstore"
	"github.com/mcpbus/mcpbus/libs/model"
)

// kvErr maps a KV failure to the contract: the store is the service's own
// dependency, so it is unavailable rather than the caller's fault.
func kvErr(what string, err error) error {
	var e *apierr.Error
	if errors.As(err, &e) {
		return e
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return apierr.Wrap(apierr.ServiceUnavailable, what+": JetStream did not answer in time", err)
	}
	if errors.Is(err, context.Canceled) {
		return apierr.Wrap(apierr.ServiceUnavailable, what+": the config service is stopping", err)
	}
	return apierr.Wrap(apierr.ServiceUnavailable, what+": "+err.Error(), err)
}

// encodeConfig is the stored form: the revision is the KV revision, not part of the value.
func encodeConfig(cfg *model.McpConfig) ([]byte, error) {
	c := *cfg
	c.Revision = 0
	data, err := json.Marshal(c)
	if err != nil {
		return nil, apierr.Wrap(apierr.Internal, "encoding config: "+err.Error(), err)
	}
	return data, nil
}

func decodeEntry(e jetstream.KeyValueEntry) (*model.McpConfig, error) {
	var c model.McpConfig
	if err := json.Unmarshal(e.Value(), &c); err != nil {
		return nil, apierr.Wrap(apierr.Internal, "stored config "+e.Key()+" is not valid JSON", err)
	}
	c.Revision = e.Revision()
	return &c, nil
}

func notFound(ref string) *apierr.Error {
	return apierr.Newf(apierr.NotFound, "server %s not found", ref).WithField("server")
}

// load reads one config by id.
func (s *Service) load(ctx context.Context, id string) (*model.McpConfig, error) {
	e, err := s.assets.Configs.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
		return nil, notFound(id)
	}
	if err != nil {
		return nil, kvErr("reading config "+id, err)
	}
	return decodeEntry(e)
}

// find resolves a server reference: an id, else a slug (through its
// reservation, else by scanning, for configs written straight to KV such as
// those of `mcpbus up --config`).
func (s *Service) find(ctx context.Context, ref string) (*model.McpConfig, error) {
	ref = strings.TrimSpace(ref)
	if ref == "" {
		return nil, apierr.Invalid("server", "server is required (a slug or an id)")
	}
	if _, err := uuid.Parse(ref); err == nil {
		cfg, err := s.load(ctx, ref)
		if apierr.Of(err) != apierr.NotFound {
			return cfg, err
		}
		// A lower-case uuid is also a valid slug: try it as one.
	}
	if !model.ValidSlug(ref) {
		return nil, notFound(ref)
	}
	e, err := s.assets.Slugs.Get(ctx, ref)
	switch {
	case err == nil:
		cfg, err := s.load(ctx, string(e.Value()))
		if err == nil && cfg.Slug == ref {
			return cfg, nil
		}
		if err != nil && apierr.Of(err) != apierr.NotFound {
			return nil, err
		}
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return nil, kvErr("reading slug "+ref, err)
	}
	all, err := s.all(ctx)
	if err != nil {
		return nil, err
	}
	for i := range all {
		if all[i].Slug == ref {
			return &all[i], nil
		}
	}
	return nil, notFound(ref)
}

// all returns every config, sorted by slug.
func (s *Service) all(ctx context.Context) ([]model.McpConfig, error) {
	list, err := configstore.Store{KV: s.assets.Configs}.List(ctx)
	if err != nil {
		return nil, kvErr("listing configs", err)
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].Slug != list[j].Slug {
			return list[i].Slug < list[j].Slug
		}
		return list[i].ID < list[j].ID
	})
	return list, nil
}

// write stores cfg with compare-and-set: lastRev 0 creates the key (it must
// not exist), otherwise the key must still be at lastRev. cfg.Revision
// becomes the new revision.
func (s *Service) write(ctx context.Context, cfg *model.McpConfig, lastRev uint64) error {
	v, err := s.nextVersion(ctx, cfg.ID)
	if err != nil {
		return err
	}
	cfg.Version = v
	data, err := encodeConfig(cfg)
	if err != nil {
		return err
	}
	var rev uint64
	if lastRev == 0 {
		rev, err = s.assets.Configs.Create(ctx, cfg.ID, data)
		if errors.Is(err, jetstream.ErrKeyExists) {
			return apierr.Newf(apierr.Conflict, "config id %s is already in use", cfg.ID).WithField("id")
		}
	} else {
		rev, err = s.assets.Configs.Update(ctx, cfg.ID, data, lastRev)
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return apierr.Newf(apierr.Conflict, "config %s changed since revision %d; get it again", cfg.Slug, lastRev).WithField("revision")
		}
	}
	if err != nil {
		return kvErr("storing config "+cfg.Slug, err)
	}
	cfg.Revision = rev
	return nil
}

// nextVersion is the version the next entry of config id takes: one more
// than its latest entry's (versions), 1 for a new id. A writer that lost the
// race for it loses the compare-and-set too.
func (s *Service) nextVersion(ctx context.Context, id string) (uint64, error) {
	h, err := s.assets.Configs.History(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 1, nil
	}
	if err != nil {
		return 0, kvErr("reading history of "+id, err)
	}
	v := versions(h)
	return v[len(v)-1] + 1, nil
}

// versions numbers a config's history entries (oldest first) per server: the
// oldest kept entry has the version stored in it (1 for a config written
// before versions were), each later entry, a delete too, one more. The KV
// keeps the last 16 entries of a key, so the stored version of the oldest
// one carries the count on. The stored version of any other entry is not
// read: an undo (restore) writes an older config again as the next version.
func versions(h []jetstream.KeyValueEntry) []uint64 {
	out := make([]uint64, len(h))
	for i, e := range h {
		switch {
		case i > 0:
			out[i] = out[i-1] + 1
		case e.Operation() == jetstream.KeyValuePut:
			out[i] = 1
			if cfg, err := decodeEntry(e); err == nil && cfg.Version > 0 {
				out[i] = cfg.Version
			}
		default:
			out[i] = 1
		}
	}
	return out
}

// idUsed reports whether id has ever been a config (its history survives a delete).
func (s *Service) idUsed(ctx context.Context, id string) (bool, error) {
	h, err := s.assets.Configs.History(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, kvErr("reading history of "+id, err)
	}
	return len(h) > 0, nil
}

func slugConflict(slug, holder string) *apierr.Error {
	return apierr.Newf(apierr.Conflict, "slug %s is already used by server %s", slug, holder).WithField("slug")
}

// reserveSlug points slug at id in mcp_slugs, so that no other config (on any
// instance) can take it. It returns how to undo the reservation if this call
// made it (a no-op when id already held it). inUse says the config as read
// has slug already.
func (s *Service) reserveSlug(ctx context.Context, slug, id string, inUse bool) (func(context.Context), error) {
	noop := func(context.Context) {}
	for range 5 {
		rev, err := s.assets.Slugs.Create(ctx, slug, []byte(id))
		if err == nil {
			return s.checkUnreserved(ctx, slug, id, rev)
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, kvErr("reserving slug "+slug, err)
		}
		e, err := s.assets.Slugs.Get(ctx, slug)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // freed meanwhile
		}
		if err != nil {
			return nil, kvErr("reading slug "+slug, err)
		}
		holder := string(e.Value())
		if holder == id && inUse {
			return noop, nil
		}
		if holder == id {
			// Another write of this config (the same rename) may have made
			// it, and would undo it (a delete at the revision it made) if it
			// lost to this one: move the revision on so that undo leaves it.
			// Should both fail, the reservation is a leftover that
			// staleReservation lets go after ReservationGrace.
			_, err := s.assets.Slugs.Update(ctx, slug, []byte(id), e.Revision())
			if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
				continue
			}
			if err != nil {
				return nil, kvErr("reserving slug "+slug, err)
			}
			return noop, nil
		}
		stale, err := s.staleReservation(ctx, slug, holder, e.Created())
		if err != nil {
			return nil, err
		}
		if !stale {
			return nil, slugConflict(slug, holder)
		}
		rev, err = s.assets.Slugs.Update(ctx, slug, []byte(id), e.Revision())
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue // someone else moved first: look again
		}
		if err != nil {
			return nil, kvErr("reserving slug "+slug, err)
		}
		s.log.Info("took over a stale slug reservation", "slug", slug, "from", holder, "id", id)
		return s.checkUnreserved(ctx, slug, id, rev)
	}
	return nil, apierr.Newf(apierr.Conflict, "slug %s is being changed by other requests; try again", slug).WithField("slug")
}

// checkUnreserved guards against configs written straight to KV (without a
// reservation) that already use slug; it undoes the new reservation if so.
func (s *Service) checkUnreserved(ctx context.Context, slug, id string, rev uint64) (func(context.Context), error) {
	undo := func(ctx context.Context) {
		if err := s.assets.Slugs.Delete(ctx, slug, jetstream.LastRevision(rev)); err != nil &&
			!errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			s.log.Warn("releasing slug reservation failed", "slug", slug, "error", err)
		}
	}
	all, err := s.all(ctx)
	if err != nil {
		undo(context.WithoutCancel(ctx))
		return nil, err
	}
	for _, c := range all {
		if c.Slug == slug && c.ID != id {
			undo(context.WithoutCancel(ctx))
			return nil, slugConflict(slug, c.ID)
		}
	}
	return undo, nil
}

// staleReservation reports whether the reservation of slug by holder is a
// leftover (a process died between steps) that may be taken over: its config
// was deleted, or it was never written or no longer uses slug and the
// reservation is older than ReservationGrace (younger, it is a create or a
// rename in progress).
func (s *Service) staleReservation(ctx context.Context, slug, holder string, reserved time.Time) (bool, error) {
	old := time.Since(reserved) > s.opts.ReservationGrace
	cfg, err := s.load(ctx, holder)
	if err == nil {
		return cfg.Slug != slug && old, nil
	}
	if apierr.Of(err) != apierr.NotFound {
		return false, err
	}
	h, err := s.assets.Configs.History(ctx, holder)
	if errors.Is(err, jetstream.ErrInvalidKey) {
		return true, nil // not a config id at all
	}
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, kvErr("reading history of "+holder, err)
	}
	if len(h) > 0 && h[len(h)-1].Operation() != jetstream.KeyValuePut {
		return true, nil // deleted
	}
	return old, nil
}

// freeSlug releases slug if id still holds it.
func (s *Service) freeSlug(ctx context.Context, slug, id string) {
	e, err := s.assets.Slugs.Get(ctx, slug)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return
	}
	if err != nil {
		s.log.Warn("reading slug reservation failed", "slug", slug, "error", err)
		return
	}
	if string(e.Value()) != id {
		return
	}
	if err := s.assets.Slugs.Delete(ctx, slug, jetstream.LastRevision(e.Revision())); err != nil &&
		!errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		s.log.Warn("releasing slug reservation failed", "slug", slug, "error", err)
	}
}

// detached is a short context for undo steps, which must run even when the
// request's context is done.
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
}
