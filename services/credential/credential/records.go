package credential

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/credential/store"
)

// ref names one credential record: whose (its owner's kind) and which (id).
// Each kind has its own records, so an id of one kind never reaches another
// kind's record.
type ref struct {
	kind model.CredentialKind
	id   string
	// owner is, for a principal's record named by a resolve, the server it
	// is for: a record that does not keep it yet is given it (see
	// model.Credentials.Owner).
	owner string
}

// key is the record's key in the store ("<kind>/<id>").
func (r ref) key() string { return store.Key(r.kind, r.id) }

// legacy is where the record may have been kept before kinds: the bare id.
// A derived (v5) id was only ever a chat profile's, an OAuth client's or the
// registries', a random one only a server's; a server with a v5 id (allowed
// before server ids had to be v4) never reads a bare v5 record, since that is
// where the profiles' keys were.
func (r ref) legacy() (string, bool) {
	if r.kind == model.CredPrincipal { // came after kinds: never kept bare
		return "", false
	}
	return r.id, r.kind.Derived() == model.IsDerivedID(r.id)
}

// checkRef validates a request's kind and id.
func checkRef(kind model.CredentialKind, id string) (ref, error) {
	if !kind.Valid() {
		return ref{}, apierr.Invalid("kind", "kind must be one of server, chat_profile, oauth_client, registry, principal")
	}
	if err := checkID(id); err != nil {
		return ref{}, err
	}
	r := ref{kind: kind.Or(), id: id}
	switch {
	case r.kind == model.CredRegistry && id != model.RegistryCredentialsID:
		return ref{}, apierr.Invalid("server_id", "the registry credentials have the id "+model.RegistryCredentialsID)
	case r.kind.Derived() && !model.IsDerivedID(id):
		return ref{}, apierr.Invalid("server_id", "the id of a "+string(r.kind)+" record is derived from its name (a v5 uuid)")
	}
	return r, nil
}

// get reads r's record; a missing record is an empty one. A record found
// only where it was kept before kinds is moved to its kind's key first.
// The caller holds r's lock.
func (s *Service) get(ctx context.Context, r ref) (model.Credentials, error) {
	rec, _, err := s.getUpdated(ctx, r)
	return rec, err
}

// getUpdated is get with the time the record was last written.
func (s *Service) getUpdated(ctx context.Context, r ref) (model.Credentials, time.Time, error) {
	creds, updated, err := s.store.Get(ctx, r.key())
	if !errors.Is(err, store.ErrNotFound) {
		return creds, updated, err
	}
	old, ok := r.legacy()
	if !ok {
		return model.Credentials{}, time.Time{}, nil
	}
	creds, updated, err = s.store.Get(ctx, old)
	if errors.Is(err, store.ErrNotFound) {
		return model.Credentials{}, time.Time{}, nil
	}
	if err != nil {
		return model.Credentials{}, time.Time{}, err
	}
	if err := s.store.Put(ctx, r.key(), creds); err != nil {
		return model.Credentials{}, time.Time{}, err
	}
	if err := s.store.Delete(ctx, old); err != nil {
		return model.Credentials{}, time.Time{}, err
	}
	s.log.Info("credential record moved to its kind", "kind", r.kind, "id", r.id)
	return creds, updated, nil
}

// write stores c as r's record, or removes the record when c holds nothing.
func (s *Service) write(ctx context.Context, r ref, c model.Credentials) error {
	if c.Empty() {
		return s.remove(ctx, r)
	}
	return s.store.Put(ctx, r.key(), c)
}

// remove deletes r's record, and its copy from before kinds. The copy goes
// first: with the record gone and the copy left (a failure between the
// two), the next read would move the copy back (get).
func (s *Service) remove(ctx context.Context, r ref) error {
	if old, ok := r.legacy(); ok {
		if err := s.store.Delete(ctx, old); err != nil {
			return err
		}
	}
	return s.store.Delete(ctx, r.key())
}

// removeWhole deletes r's whole record and, for a server, the records that
// go with it: its OAuth client secret and, with principals, its principals'
// own records (this is how the config service deletes a server's secrets).
// They are separate records in the store, deleted one at a time, so a
// failure (Vault down partway) can leave some deleted. r's own record, the
// one the config points at, goes last: until it is gone the server keeps
// its own secrets, and the delete run again finishes the rest. A failure
// after the first record went says so.
func (s *Service) removeWhole(ctx context.Context, r ref, principals bool) error {
	removed := 0
	var steps []func() error
	if principals {
		steps = append(steps, func() error {
			n, err := s.removePrincipals(ctx, r.id)
			removed += n
			return err
		})
	}
	if r.kind == model.CredServer {
		steps = append(steps, func() error {
			return s.removeOther(ctx, ref{kind: model.CredOAuthClient, id: model.OAuthClientCredentialID(r.id)})
		})
	}
	steps = append(steps, func() error { return s.remove(ctx, r) })
	for i, step := range steps {
		err := step()
		if err == nil {
			continue
		}
		if i == 0 && removed == 0 {
			return err // nothing was deleted
		}
		e := apierr.From(err)
		s.log.Warn("a whole-record delete stopped partway", "kind", r.kind, "id", r.id, "code", e.Code, "error", e.Message)
		return apierr.Wrap(e.Code, fmt.Sprintf("the delete of the credentials of %s %s stopped partway (%s): records that go with it "+
			"(its principals' own credentials, its OAuth client secret) may be deleted, its own record (deleted last) may not; run the delete again", r.kind, r.id, e.Message), err)
	}
	return nil
}

// removeOther deletes r's record under r's own lock, for a request that
// holds another record's lock (that one is always taken first).
func (s *Service) removeOther(ctx context.Context, r ref) error {
	unlock, err := s.locks.lock(ctx, r.key())
	if err != nil {
		return err
	}
	defer unlock()
	return s.remove(ctx, r)
}

// removePrincipals deletes every principal's own record for the server
// serverID: their ids are hashes of the server and the principal, so the
// records are found by the owner each keeps (model.Credentials.Owner). A
// record written before owners were kept, and never resolved since, names
// none and stays.
func (s *Service) removePrincipals(ctx context.Context, serverID string) (removed int, err error) {
	lister, ok := s.store.(store.Lister)
	if !ok {
		return 0, apierr.Newf(apierr.Internal, "the %s credential store cannot list its records", s.store.Name())
	}
	keys, err := lister.List(ctx)
	if err != nil {
		return 0, err
	}
	prefix := store.Key(model.CredPrincipal, "")
	for _, k := range keys {
		id, ok := strings.CutPrefix(k, prefix)
		if !ok {
			continue
		}
		gone, err := s.removeOwned(ctx, ref{kind: model.CredPrincipal, id: id}, serverID)
		if err != nil {
			return removed, err
		}
		if gone {
			removed++
			s.changed(ref{kind: model.CredPrincipal, id: id}, VerbDelete)
		}
	}
	if removed > 0 {
		s.log.Info("principals' credentials removed with their server", "server_id", serverID, "records", removed)
	}
	return removed, nil
}

// removeOwned deletes r's record under its own lock when it is owner's.
func (s *Service) removeOwned(ctx context.Context, r ref, owner string) (bool, error) {
	unlock, err := s.locks.lock(ctx, r.key())
	if err != nil {
		return false, err
	}
	defer unlock()
	rec, _, err := s.store.Get(ctx, r.key())
	if errors.Is(err, store.ErrNotFound) || (err == nil && rec.Owner != owner) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, s.remove(ctx, r)
}

// updateTries bounds how often update reads a record again after another
// instance wrote it between the read and the write.
const updateTries = 8

// update changes r's record by change and writes the result (removing the
// record when nothing is left), r's lock held. Instances sharing a store
// (Vault, store.Versioned) each hold only their own locks, so the write is
// made only if the record is still what was read; else it is read and
// changed again, and a write another instance made in between stands.
func (s *Service) update(ctx context.Context, r ref, change func(model.Credentials) (model.Credentials, error)) (model.Credentials, error) {
	m, ok := s.store.(measuredStore)
	if !ok || !m.versioned() {
		rec, err := s.get(ctx, r)
		if err != nil {
			return model.Credentials{}, err
		}
		if rec, err = change(rec); err != nil {
			return model.Credentials{}, err
		}
		return rec, s.write(ctx, r, rec)
	}
	for range updateTries {
		rec, _, version, err := m.GetVersion(ctx, r.key())
		if errors.Is(err, store.ErrNotFound) {
			if _, legacy := r.legacy(); legacy && version == 0 {
				// Maybe kept before kinds: get moves it, then read again.
				if moved, err := s.get(ctx, r); err != nil {
					return model.Credentials{}, err
				} else if !moved.Empty() {
					continue
				}
			}
			rec, err = model.Credentials{}, nil
		}
		if err != nil {
			return model.Credentials{}, err
		}
		if rec, err = change(rec); err != nil {
			return model.Credentials{}, err
		}
		if rec.Empty() {
			// A removal has no check-and-set (a metadata delete): a write
			// another instance makes at this moment may be removed too.
			return rec, s.remove(ctx, r)
		}
		err = m.PutIf(ctx, r.key(), rec, version)
		if errors.Is(err, store.ErrChanged) {
			s.log.Debug("credential record written by another instance meanwhile; reading it again", "kind", r.kind, "id", r.id)
			continue
		}
		return rec, err
	}
	return model.Credentials{}, apierr.Newf(apierr.Conflict, "the credentials of %s %s kept changing under other requests; try again", r.kind, r.id)
}
