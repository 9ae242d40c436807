// Package profiles stores the chat profiles: one KV entry per profile in
// bus.BucketChatProfiles, keyed by name. A profile's API key is never in
// it: the key goes to the credential service, sealed to its curve key as
// every secret is (libs/credclient), under the credential id
// model.ChatProfileCredentialID(name); profiles say only has_api_key.
package profiles

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/model"
)

// Options configure a Store; zero values take the defaults.
type Options struct {
	// Prefix is the subject prefix of the credential service (default bus.DefaultPrefix).
	Prefix string
	// Replicas of the bucket (1 embedded, 3 on a cluster).
	Replicas int
	// Logger hears what start-up waits for.
	Logger *slog.Logger
	// Now is the clock of created_at and updated_at (default time.Now).
	Now func() time.Time
}

// Store keeps the profiles. It is safe for concurrent use.
type Store struct {
	kv   jetstream.KeyValue
	cred *credclient.Client
	now  func() time.Time
}

// Open creates (or opens) the bucket and returns the store; it talks to the
// credential service over nc.
func Open(ctx context.Context, nc *nats.Conn, opts Options) (*Store, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	kv, err := bus.EnsureKV(ctx, js, jetstream.KeyValueConfig{
		Bucket:      bus.BucketChatProfiles,
		Description: "chat profiles by name (API keys are in the credential service)",
		History:     5,
		Storage:     jetstream.FileStorage,
	}, max(opts.Replicas, 1), opts.Logger)
	if err != nil {
		return nil, err
	}
	// Profile writes are callers' requests: ride out a leader election (bus.RetryKV).
	return &Store{kv: bus.RetryKV(kv), cred: credclient.NewForChat(nc, opts.Prefix), now: opts.Now}, nil
}

// APIKey says what Put does with the profile's API key. The zero value
// keeps the stored key (or its absence).
type APIKey struct {
	// Value is a key in clear, from a caller in this process: it is sealed
	// to the credential service before it leaves.
	Value string
	// Sealed is a key a client sealed already (credclient.Sealer.SealSecrets
	// of model.Credentials{Env: {model.ChatAPIKeyEnv: key}}): it is
	// forwarded unopened; its names must be exactly that env var.
	Sealed model.SealedSecrets
	// Remove deletes the stored key.
	Remove bool
}

func (k APIKey) given() bool { return k.Value != "" || !k.Sealed.IsZero() }

// check refuses an ambiguous or malformed key before anything is written.
func (k APIKey) check() error {
	n := 0
	for _, set := range []bool{k.Value != "", !k.Sealed.IsZero(), k.Remove} {
		if set {
			n++
		}
	}
	if n > 1 {
		return apierr.Invalid("api_key", "give a key, a sealed key or its removal, not several")
	}
	if k.Value != "" && (strings.TrimSpace(k.Value) != k.Value || strings.ContainsFunc(k.Value, func(r rune) bool { return r < 0x20 || r == 0x7f })) {
		return apierr.Invalid("api_key", "the API key must not have spaces around it or control characters")
	}
	if !k.Sealed.IsZero() {
		s := k.Sealed
		switch {
		case len(s.Sealed) == 0:
			return apierr.Invalid(credclient.FieldSealedConfig, "sealed_secrets is required with sender_key and secret_names")
		case len(s.Sealed) > credclient.MaxSealed:
			return apierr.Invalid(credclient.FieldSealedConfig, "sealed_secrets is too long")
		case s.SenderKey == "":
			return apierr.Invalid("sender_key", "sender_key is required with sealed_secrets")
		case s.Names == nil || !slices.Equal(s.Names.Env, []string{model.ChatAPIKeyEnv}) ||
			len(s.Names.Headers) > 0 || len(s.Names.Keyfiles) > 0 || s.Names.OAuth != nil:
			return apierr.Invalid("secret_names", "a profile's sealed secrets hold exactly the env var "+model.ChatAPIKeyEnv)
		}
	}
	return nil
}

// request is the cred.set request of the key (replacing the record: it
// holds only the key).
func (k APIKey) request(id string, dryRun bool) model.CredSetRequest {
	req := model.CredSetRequest{ServerID: id, Kind: model.CredChatProfile, Replace: true, DryRun: dryRun}
	if k.Value != "" {
		req.Credentials = model.Credentials{Env: map[string]string{model.ChatAPIKeyEnv: k.Value}}
	} else {
		req.Sealed, req.SenderKey, req.Names = k.Sealed.Sealed, k.Sealed.SenderKey, k.Sealed.Names
	}
	return req
}

// Put creates or replaces a profile and applies key. Invalid input changes
// nothing (VALIDATION_ERROR with the field); a non-zero p.Revision must be
// the stored one (else CONFLICT). It returns the profile as stored.
func (s *Store) Put(ctx context.Context, p model.Profile, key APIKey) (model.Profile, error) {
	p.Normalize()
	if e := p.Validate(); e != nil {
		return model.Profile{}, e
	}
	if err := key.check(); err != nil {
		return model.Profile{}, err
	}
	prev, rev, err := s.get(ctx, p.Name)
	exists := err == nil
	if err != nil && apierr.Of(err) != apierr.NotFound {
		return model.Profile{}, err
	}
	if p.Revision != 0 && p.Revision != rev {
		return model.Profile{}, apierr.Newf(apierr.Conflict, "profile %s changed since revision %d (now %d)", p.Name, p.Revision, rev)
	}
	credID := model.ChatProfileCredentialID(p.Name)
	if key.given() {
		// The credential service checks the key (it opens sealed ones)
		// before anything is written.
		if _, err := s.cred.Set(ctx, key.request(credID, true)); err != nil {
			return model.Profile{}, credErr("set", err)
		}
	}

	now := s.now().UTC()
	p.CreatedAt, p.UpdatedAt = now, now
	if exists {
		p.CreatedAt = prev.CreatedAt
	}
	p.APIKeyRef = credID
	p.HasAPIKey = exists && prev.HasAPIKey
	switch {
	case key.given():
		p.HasAPIKey = true
	case key.Remove:
		p.HasAPIKey = false
	}
	newRev, err := s.write(ctx, p, exists, rev)
	if err != nil {
		return model.Profile{}, err
	}

	var kerr error
	switch {
	case key.given():
		_, kerr = s.cred.Set(ctx, key.request(credID, false))
		kerr = credErr("set", kerr)
	case key.Remove:
		kerr = s.deleteKey(ctx, credID)
	}
	if kerr != nil {
		// Put the profile back as it was: the key did not change.
		s.undo(ctx, prev, exists, newRev)
		return model.Profile{}, kerr
	}
	p.Revision = newRev
	return p, nil
}

// write stores p: created when it did not exist, else updated from rev.
func (s *Store) write(ctx context.Context, p model.Profile, exists bool, rev uint64) (uint64, error) {
	p.Revision = 0
	data, err := json.Marshal(p)
	if err != nil {
		return 0, apierr.Wrap(apierr.Internal, "encoding profile "+p.Name, err)
	}
	var newRev uint64
	if exists {
		newRev, err = s.kv.Update(ctx, p.Name, data, rev)
	} else {
		newRev, err = s.kv.Create(ctx, p.Name, data)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || wrongLast(err) {
		return 0, apierr.Newf(apierr.Conflict, "profile %s was changed by someone else meanwhile", p.Name)
	}
	if err != nil {
		return 0, bus.JetStreamErr("storing profile "+p.Name, err)
	}
	return newRev, nil
}

// undo restores the profile after its key could not be stored.
func (s *Store) undo(ctx context.Context, prev model.Profile, existed bool, rev uint64) {
	ctx = context.WithoutCancel(ctx)
	if !existed {
		_ = s.kv.Delete(ctx, prev.Name, jetstream.LastRevision(rev))
		return
	}
	_, _ = s.write(ctx, prev, true, rev)
}

// Get returns the profile named name (NOT_FOUND when there is none).
func (s *Store) Get(ctx context.Context, name string) (model.Profile, error) {
	if !model.ValidSlug(name) {
		return model.Profile{}, apierr.Invalid("name", "a profile name is a slug")
	}
	p, _, err := s.get(ctx, name)
	return p, err
}

func (s *Store) get(ctx context.Context, name string) (model.Profile, uint64, error) {
	e, err := s.kv.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return model.Profile{Name: name}, 0, apierr.Newf(apierr.NotFound, "profile %s not found", name)
	}
	if err != nil {
		return model.Profile{}, 0, bus.JetStreamErr("reading profile "+name, err)
	}
	var p model.Profile
	if err := json.Unmarshal(e.Value(), &p); err != nil {
		return model.Profile{}, 0, apierr.Wrap(apierr.Internal, "profile "+name+" is malformed", err)
	}
	p.Revision = e.Revision()
	return p, e.Revision(), nil
}

// List returns every profile, by name.
func (s *Store) List(ctx context.Context) ([]model.Profile, error) {
	keys, err := s.kv.ListKeys(ctx)
	if err != nil {
		return nil, bus.JetStreamErr("listing profiles", err)
	}
	var names []string
	for k := range keys.Keys() {
		names = append(names, k)
	}
	slices.Sort(names)
	out := make([]model.Profile, 0, len(names))
	for _, n := range names {
		p, _, err := s.get(ctx, n)
		if apierr.Of(err) == apierr.NotFound {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// Delete removes a profile and its API key (NOT_FOUND when there is none).
func (s *Store) Delete(ctx context.Context, name string) error {
	if !model.ValidSlug(name) {
		return apierr.Invalid("name", "a profile name is a slug")
	}
	if _, _, err := s.get(ctx, name); err != nil {
		return err
	}
	// The key first: a profile left behind can be deleted again, a key left
	// behind would be found by no one.
	if err := s.deleteKey(ctx, model.ChatProfileCredentialID(name)); err != nil {
		return err
	}
	if err := s.kv.Purge(ctx, name); err != nil {
		return bus.JetStreamErr("deleting profile "+name, err)
	}
	return nil
}

// KeyStored asks the credential service whether it holds the API key of
// the profile named name (the profile's has_api_key is what was last set).
func (s *Store) KeyStored(ctx context.Context, name string) (bool, error) {
	if !model.ValidSlug(name) {
		return false, apierr.Invalid("name", "a profile name is a slug")
	}
	d, err := s.cred.Describe(ctx, model.CredDescribeRequest{ServerID: model.ChatProfileCredentialID(name), Kind: model.CredChatProfile})
	if apierr.Of(err) == apierr.NotFound {
		return false, nil
	}
	if err != nil {
		return false, credErr("describe", err)
	}
	return d.Has(model.ChatAPIKeyEnv), nil
}

// deleteKey removes a stored key; none stored is not an error.
func (s *Store) deleteKey(ctx context.Context, id string) error {
	_, err := s.cred.Delete(ctx, model.CredDeleteRequest{ServerID: id, Kind: model.CredChatProfile})
	if err != nil && apierr.Of(err) != apierr.NotFound {
		return credErr("delete", err)
	}
	return nil
}

// credErr maps a failed credential request as the config service does: an
// absent or silent credential service is SERVICE_UNAVAILABLE; its own
// answers pass through, their fields named as Put's (the key is api_key).
func credErr(verb string, err error) error {
	if err == nil {
		return nil
	}
	switch apierr.Of(err) {
	case apierr.ServiceUnavailable:
		return apierr.Wrap(apierr.ServiceUnavailable, "credential service is not available ("+verb+")", err)
	case apierr.Network:
		return apierr.Wrap(apierr.ServiceUnavailable, "credential service did not answer ("+verb+")", err)
	}
	var e *apierr.Error
	if errors.As(err, &e) && e.Code == apierr.Validation {
		switch f := e.Field; {
		case f == credclient.FieldSealed:
			return e.WithField(credclient.FieldSealedConfig)
		case f == "names":
			return e.WithField("secret_names")
		case strings.HasPrefix(f, "credentials"):
			return e.WithField("api_key")
		}
	}
	return err
}

func wrongLast(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
