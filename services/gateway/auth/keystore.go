package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// BucketAPIKeys is the JetStream KV bucket of API key records (key = key id).
const BucketAPIKeys = "mcp_apikeys"

// KeyPrefix starts every API key: mcpbus_<id>_<secret>.
const KeyPrefix = "mcpbus_"

const (
	idBytes     = 8  // 16 hex characters: a lookup handle, not a secret
	secretBytes = 32 // 256 bits from crypto/rand
	maxNameLen  = 64
	maxGlobs    = 64
	kvTimeout   = 5 * time.Second
	// adminTimeout bounds a key's create, list or revoke (an operator
	// waits; the caller's own deadline cuts it shorter): long enough to ride
	// out a leader election of the bucket (4–9 s after a node dies).
	adminTimeout = 20 * time.Second
)

var (
	secretLen = base64.RawURLEncoding.EncodedLen(secretBytes)
	// errBadKey is the one answer to every unusable key: callers learn nothing
	// about which part was wrong.
	errBadKey = apierr.New(apierr.Unauthorized, "invalid or revoked API key")
)

// record is what the bucket holds: the public description plus the SHA-256
// of the secret (never the secret itself).
type record struct {
	model.APIKey
	Hash string `json:"hash"`
}

// cached is a record with the bucket revision it was read at, so an older
// watch delivery never overwrites a newer local write. What Authenticate
// needs per request is made once here: the decoded hash (nil when the
// record's is not hex: no secret matches) and the key's Principal.
type cached struct {
	rec       record
	revision  uint64
	hash      []byte
	principal *Principal
}

func newCached(rec record, revision uint64) cached {
	hash, err := hex.DecodeString(rec.Hash)
	if err != nil {
		hash = nil
	}
	return cached{rec: rec, revision: revision, hash: hash,
		principal: &Principal{KeyID: rec.ID, Name: rec.Name, Scopes: slices.Clone(rec.Scopes), Tools: rec.Tools, Rate: rec.Rate,
			ToolsMode: rec.ToolsMode, PinnedTools: slices.Clone(rec.PinnedTools)}}
}

// StoreOptions configure a KeyStore.
type StoreOptions struct {
	// Replicas of the bucket (1 embedded, 3 on a cluster).
	Replicas int
	Logger   *slog.Logger
}

// KeyStore keeps API keys in the mcp_apikeys bucket. Every gateway instance
// watches the bucket, so a revocation made anywhere is refused everywhere
// within the watch's delivery time; keys missing from the local view are read
// through from the bucket (one created on another instance a moment ago).
type KeyStore struct {
	kv  jetstream.KeyValue
	log *slog.Logger

	mu       sync.RWMutex
	cache    map[string]cached
	onRevoke []func(keyID string)
	// live is set while the watch runs and the cache is current; epoch is
	// the connection's reconnect count when the cache was loaded.
	live  atomic.Bool
	epoch atomic.Uint64
	nc    *nats.Conn
	// resynced: a snapshot came before (the watch's goroutine's alone).
	resynced bool

	stop context.CancelFunc
	done chan struct{}
}

// OpenKeyStore creates (or updates) the bucket, loads every key and keeps
// watching it until Close.
func OpenKeyStore(ctx context.Context, js jetstream.JetStream, opts StoreOptions) (*KeyStore, error) {
	if opts.Replicas <= 0 {
		opts.Replicas = 1
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	kv, err := bus.EnsureKV(ctx, js, jetstream.KeyValueConfig{
		Bucket:      BucketAPIKeys,
		Description: "gateway API keys by id: SHA-256 of the secret, scopes, tool filter, rate",
		History:     4,
		Storage:     jetstream.FileStorage,
	}, opts.Replicas, opts.Logger)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	life, stop := context.WithCancel(context.Background())
	// Key writes are callers' requests: ride out a leader election (bus.Retry).
	s := &KeyStore{kv: bus.RetryKV(kv), log: opts.Logger, cache: map[string]cached{}, nc: js.Conn(), stop: stop, done: make(chan struct{})}
	synced := make(chan struct{})
	go s.watch(life, synced)
	select {
	case <-synced:
		return s, nil
	case <-ctx.Done():
		s.Close()
		return nil, fmt.Errorf("auth: loading API keys: %w", ctx.Err())
	}
}

// watch keeps the cache in step with the bucket until ctx ends: each
// snapshot replaces it, each update is applied. bus.FollowKV starts the
// watch over after a NATS restart, which a KV watch alone does not survive.
// Until the new snapshot is in, the cache is not current and Authenticate
// reads every key from the bucket, so no revocation is missed meanwhile.
// synced closes after the first complete load.
func (s *KeyStore) watch(ctx context.Context, synced chan struct{}) {
	defer close(s.done)
	once := sync.OnceFunc(func() { close(synced) })
	defer once()
	bus.FollowKV(ctx, s.nc, s.kv, bus.KVHandler{
		Snapshot: func(entries map[string]jetstream.KeyValueEntry) {
			cache := make(map[string]cached, len(entries))
			for id, e := range entries {
				if c, ok := s.decode(e); ok {
					cache[id] = c
				}
			}
			s.epoch.Store(s.reconnects())
			s.mu.Lock()
			old := s.cache
			s.cache = cache
			listeners := s.onRevoke
			s.mu.Unlock()
			s.live.Store(true)
			// A key revoked or deleted while the watch was down (a
			// reconnect, a leader change) comes only as a snapshot without
			// it: what it holds open is ended as for an update.
			// So is one first read from the bucket meanwhile (not in the
			// old cache) and revoked before the snapshot: the listeners end
			// what nothing holds open at no cost.
			ended := map[string]bool{}
			for id, was := range old {
				if now, ok := cache[id]; !was.rec.Revoked() && (!ok || now.rec.Revoked()) {
					ended[id] = true
				}
			}
			if s.resynced {
				for id, now := range cache {
					if _, ok := old[id]; !ok && now.rec.Revoked() {
						ended[id] = true
					}
				}
			}
			s.resynced = true // the first snapshot is the load: nothing was open
			for id := range ended {
				for _, fn := range listeners {
					fn(id)
				}
			}
		},
		Update: s.apply,
		Ready:  once,
		Stale:  func() { s.live.Store(false) },
	}, bus.KVFollowOptions{Logger: s.log})
}

func (s *KeyStore) reconnects() uint64 { return s.nc.Stats().Reconnects }

// current reports whether the cache follows the bucket now.
func (s *KeyStore) current() bool {
	return s.live.Load() && s.reconnects() == s.epoch.Load()
}

// decode reads a watched entry; ok is false for deletes and unreadable records.
func (s *KeyStore) decode(e jetstream.KeyValueEntry) (cached, bool) {
	if e.Operation() != jetstream.KeyValuePut {
		return cached{}, false
	}
	var rec record
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		s.log.Warn("skipping an unreadable API key record", "id", e.Key(), "error", err)
		return cached{}, false
	}
	return newCached(rec, e.Revision()), true
}

func (s *KeyStore) apply(e jetstream.KeyValueEntry) {
	c, ok := s.decode(e)
	s.mu.Lock()
	if cur, found := s.cache[e.Key()]; found && cur.revision > e.Revision() {
		s.mu.Unlock()
		return
	}
	if ok {
		s.cache[e.Key()] = c
	} else {
		delete(s.cache, e.Key())
	}
	listeners := s.onRevoke
	s.mu.Unlock()
	if !ok || c.rec.Revoked() {
		// Requests are checked one by one; what a key already holds open
		// (MCP sessions, event streams) is ended by the listeners.
		for _, fn := range listeners {
			fn(e.Key())
		}
	}
}

// OnRevoke registers fn to be told the id of every key revoked or deleted
// (anywhere: the bucket is watched), so that what the key holds open ends.
func (s *KeyStore) OnRevoke(fn func(keyID string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onRevoke = append(s.onRevoke, fn)
}

// Close stops watching the bucket.
func (s *KeyStore) Close() {
	s.stop()
	<-s.done
}

// Create makes a key and returns it in full, the only time it is ever shown.
func (s *KeyStore) Create(ctx context.Context, req model.KeyCreateRequest) (model.KeyCreateReply, error) {
	scopes, err := checkCreate(&req)
	if err != nil {
		return model.KeyCreateReply{}, err
	}
	id, err := randomHex(idBytes)
	if err != nil {
		return model.KeyCreateReply{}, err
	}
	secret := make([]byte, secretBytes)
	if _, err := rand.Read(secret); err != nil {
		return model.KeyCreateReply{}, apierr.Wrap(apierr.Internal, "no randomness for a key", err)
	}
	token := base64.RawURLEncoding.EncodeToString(secret)
	clear(secret)
	rec := record{
		APIKey: model.APIKey{ID: id, Name: strings.TrimSpace(req.Name), Scopes: scopes, Tools: req.Tools,
			ToolsMode: req.ToolsMode, PinnedTools: req.PinnedTools, Rate: req.Rate, CreatedAt: time.Now().UTC()},
		Hash: hashSecret(token),
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return model.KeyCreateReply{}, apierr.Wrap(apierr.Internal, "encoding the key record", err)
	}
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	rev, err := s.kv.Create(ctx, id, data)
	if err != nil {
		return model.KeyCreateReply{}, apierr.Wrap(apierr.ServiceUnavailable, "storing the key: "+err.Error(), err)
	}
	s.put(rec, rev)
	return model.KeyCreateReply{Key: KeyPrefix + id + "_" + token, APIKey: rec.APIKey}, nil
}

// checkCreate validates a create request and returns its scopes, defaulted
// and de-duplicated.
func checkCreate(req *model.KeyCreateRequest) ([]string, error) {
	name := strings.TrimSpace(req.Name)
	switch {
	case name == "":
		return nil, apierr.Invalid("name", "name is required (who or what uses the key)")
	case utf8.RuneCountInString(name) > maxNameLen:
		return nil, apierr.Invalid("name", fmt.Sprintf("name is longer than %d characters", maxNameLen))
	case strings.ContainsFunc(name, unicode.IsControl):
		return nil, apierr.Invalid("name", "name must not contain control characters")
	}
	scopes := []string{}
	for i, sc := range req.Scopes {
		if sc != ScopeAdmin && sc != ScopeCall && sc != ScopeChat {
			return nil, apierr.Invalid(fmt.Sprintf("scopes[%d]", i), fmt.Sprintf("unknown scope %q (admin, call or chat)", sc))
		}
		if !slices.Contains(scopes, sc) {
			scopes = append(scopes, sc)
		}
	}
	if len(scopes) == 0 {
		scopes = []string{ScopeCall}
	}
	for field, globs := range map[string][]string{"tools.allow": req.Tools.Allow, "tools.deny": req.Tools.Deny} {
		if len(globs) > maxGlobs {
			return nil, apierr.Invalid(field, fmt.Sprintf("at most %d patterns", maxGlobs))
		}
		for i, g := range globs {
			if _, err := path.Match(g, ""); err != nil || strings.TrimSpace(g) == "" {
				return nil, apierr.Invalid(fmt.Sprintf("%s[%d]", field, i), fmt.Sprintf("%q is not a valid glob (path.Match syntax: * ? [a-z])", g))
			}
		}
	}
	if err := checkToolsMode(req); err != nil {
		return nil, err
	}
	if r := req.Rate; r != nil {
		if err := r.Check(); err != nil {
			return nil, err
		}
	}
	return scopes, nil
}

// List returns the keys by creation time, never their secrets or hashes.
func (s *KeyStore) List(ctx context.Context, includeRevoked bool) ([]model.APIKey, error) {
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	lister, err := s.kv.ListKeys(ctx)
	if err != nil {
		return nil, apierr.Wrap(apierr.ServiceUnavailable, "listing keys: "+err.Error(), err)
	}
	defer func() { _ = lister.Stop() }()
	out := []model.APIKey{}
	for id := range lister.Keys() {
		rec, _, err := s.read(ctx, id)
		if err != nil {
			if apierr.Of(err) == apierr.NotFound {
				continue // deleted between the listing and the read
			}
			return nil, err
		}
		if includeRevoked || !rec.Revoked() {
			out = append(out, rec.APIKey)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// Revoke marks a key revoked; every gateway refuses it from then on. Revoking
// a revoked key changes nothing.
func (s *KeyStore) Revoke(ctx context.Context, id string) (model.APIKey, error) {
	if !validID(id) {
		return model.APIKey{}, apierr.Invalid("id", "id must be the 16 hex characters of a key id (see keys list)")
	}
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	for range 5 { // optimistic concurrency: retry a concurrent write
		rec, rev, err := s.read(ctx, id)
		if err != nil {
			return model.APIKey{}, err
		}
		if rec.Revoked() {
			return rec.APIKey, nil
		}
		rec.RevokedAt = time.Now().UTC()
		data, err := json.Marshal(rec)
		if err != nil {
			return model.APIKey{}, apierr.Wrap(apierr.Internal, "encoding the key record", err)
		}
		newRev, err := s.kv.Update(ctx, id, data, rev)
		if errors.Is(err, jetstream.ErrKeyExists) {
			continue
		}
		if err != nil {
			return model.APIKey{}, apierr.Wrap(apierr.ServiceUnavailable, "revoking the key: "+err.Error(), err)
		}
		s.put(rec, newRev)
		return rec.APIKey, nil
	}
	return model.APIKey{}, apierr.Newf(apierr.Conflict, "key %s changed during the revocation; try again", id)
}

// Authenticate checks a bearer token and returns its principal. Every failure
// is the same UNAUTHORIZED error; other codes mean the store could not answer.
// The principal is shared by every request of the key's current record:
// callers read it and never change it.
func (s *KeyStore) Authenticate(ctx context.Context, token string) (*Principal, error) {
	id, secret, ok := ParseKey(token)
	if !ok {
		return nil, errBadKey
	}
	s.mu.RLock()
	c, ok := s.cache[id]
	s.mu.RUnlock()
	if !ok || !s.current() {
		// Not seen by the watch yet (a key just made on another instance),
		// or the watch is down: the bucket decides.
		rctx, cancel := context.WithTimeout(ctx, kvTimeout)
		r, rev, err := s.read(rctx, id)
		cancel()
		if apierr.Of(err) == apierr.NotFound {
			return nil, errBadKey
		}
		if err != nil {
			return nil, err
		}
		c = newCached(r, rev)
	}
	var buf [64]byte // ParseKey allows secretLen (43) bytes: hashed from the stack, no allocation
	got := sha256.Sum256(buf[:copy(buf[:], secret)])
	if c.hash == nil || subtle.ConstantTimeCompare(got[:], c.hash) != 1 || c.rec.Revoked() {
		return nil, errBadKey
	}
	return c.principal, nil
}

// Knows reports whether id is a key this instance has seen (revoked ones
// too), without asking the bucket: the failed-login throttle keeps a
// bucket per known id, and a made-up id must not cost a KV read.
func (s *KeyStore) Knows(id string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.cache[id]
	return ok
}

// read fetches a record from the bucket.
func (s *KeyStore) read(ctx context.Context, id string) (record, uint64, error) {
	e, err := s.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return record{}, 0, apierr.Newf(apierr.NotFound, "no key with id %s", id).WithField("id")
	}
	if err != nil {
		return record{}, 0, apierr.Wrap(apierr.ServiceUnavailable, "reading key "+id+": "+err.Error(), err)
	}
	var rec record
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return record{}, 0, apierr.Wrap(apierr.Internal, "key record "+id+" is unreadable", err)
	}
	return rec, e.Revision(), nil
}

// put records a local write at once, so this instance never waits for its
// own watch to see it.
func (s *KeyStore) put(rec record, revision uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.cache[rec.ID]; ok && cur.revision > revision {
		return
	}
	s.cache[rec.ID] = newCached(rec, revision)
}

// ParseKey splits mcpbus_<id>_<secret>; ok is false for anything else.
func ParseKey(token string) (id, secret string, ok bool) {
	rest, found := strings.CutPrefix(token, KeyPrefix)
	if !found {
		return "", "", false
	}
	id, secret, found = strings.Cut(rest, "_")
	if !found || !validID(id) || len(secret) != secretLen {
		return "", "", false
	}
	var buf [secretBytes + 2]byte // a stack buffer: no allocation per request
	if n, err := base64.RawURLEncoding.Decode(buf[:], []byte(secret)); err != nil || n != secretBytes {
		return "", "", false
	}
	return id, secret, true
}

func validID(id string) bool {
	if len(id) != 2*idBytes {
		return false
	}
	for _, r := range id {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return false
		}
	}
	return true
}

func hashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", apierr.Wrap(apierr.Internal, "no randomness for a key id", err)
	}
	return hex.EncodeToString(b), nil
}

// checkToolsMode validates tools_mode and pinned_tools: pins are exact
// namespaced names (a glob could pin a whole catalog back into the list)
// and only mean something in search mode.
func checkToolsMode(req *model.KeyCreateRequest) error {
	switch req.ToolsMode {
	case "", model.KeyToolsModeSearch:
	default:
		return apierr.Invalid("tools_mode", fmt.Sprintf("unknown tools_mode %q (search, or absent for every tool)", req.ToolsMode))
	}
	if len(req.PinnedTools) > 0 && req.ToolsMode != model.KeyToolsModeSearch {
		return apierr.Invalid("pinned_tools", "pinned_tools apply to tools_mode search only (every tool is listed otherwise)")
	}
	if len(req.PinnedTools) > model.MaxKeyPinnedTools {
		return apierr.Invalid("pinned_tools", fmt.Sprintf("at most %d pinned tools", model.MaxKeyPinnedTools))
	}
	for i, name := range req.PinnedTools {
		if name == "" || len(name) > 128 || strings.ContainsFunc(name, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) }) {
			return apierr.Invalid(fmt.Sprintf("pinned_tools[%d]", i), fmt.Sprintf("%q is not a tool name (<server>__<tool>, at most 128 characters)", name))
		}
	}
	return nil
}
