package jwtauth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
	"github.com/mcpbus/mcpbus/services/gateway/internal/gwaudit"
)

// An access token is good until its exp; the revocation list refuses some
// before that: one token by its jti, or every token of a subject issued up
// to a moment. The list lives in a KV bucket every gateway instance watches,
// so a revocation made on one is in force on all within the watch's
// delivery time. Keys hash the jti or subject (any characters, any length);
// the bucket's TTL, at least the longest access-token lifetime, drops an
// entry once every token it covers has expired.

// BucketRevocations is the JetStream KV bucket of the revocation list.
const BucketRevocations = "mcp_token_revocations"

// DefaultRevocationTTL is how long a revocation is kept: access tokens
// must not live longer than this for a revocation to outlast them.
const DefaultRevocationTTL = 24 * time.Hour

// maxRevokeValue bounds a jti or subject given to revoke.
const maxRevokeValue = 512

// RevocationOptions configure the list.
type RevocationOptions struct {
	// Replicas of the bucket (1 embedded, 3 on a cluster).
	Replicas int
	// TTL is how long an entry is kept (default DefaultRevocationTTL).
	TTL    time.Duration
	Logger *slog.Logger
	// Audit records revocations (nil: not recorded).
	Audit *gwaudit.Recorder
}

// Revocations is the revocation list as this gateway sees it.
type Revocations struct {
	kv    jetstream.KeyValue
	ttl   time.Duration
	log   *slog.Logger
	audit *gwaudit.Recorder

	mu   sync.RWMutex
	jti  map[string]revRevocation // by value
	subs map[string]revRevocation // by subKey
	// on are told each revocation made since (OnRevoke), under mu.
	on []func(model.TokenRevocation)

	stop context.CancelFunc
	done chan struct{}

	// onStored are told each revocation this instance stores (OnStored;
	// under mu: tokens.revoke may be served before the gateway registers).
	onStored []func(model.TokenRevocation)
}

// OnStored registers fn to be told each revocation stored through this
// instance, once stored: what is shared (the held calls of a revoked
// subject, in KV) is acted on once, by the instance that revoked. What each
// instance holds in memory follows OnRevoke instead.
func (r *Revocations) OnStored(fn func(model.TokenRevocation)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.onStored = append(r.onStored, fn)
}

// revRevocation is a revocation and the bucket revision it was written at.
type revRevocation struct {
	model.TokenRevocation
	rev uint64
}

// OpenRevocations creates (or updates) the bucket, loads it and keeps
// watching it until Close.
func OpenRevocations(ctx context.Context, js jetstream.JetStream, opts RevocationOptions) (*Revocations, error) {
	if opts.TTL <= 0 {
		opts.TTL = DefaultRevocationTTL
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	kv, err := bus.EnsureKV(ctx, js, jetstream.KeyValueConfig{
		Bucket:      BucketRevocations,
		Description: "revoked OAuth access tokens (by jti) and subjects (tokens issued before a time), kept as long as the longest token lifetime (gateway)",
		History:     1,
		TTL:         opts.TTL,
		Storage:     jetstream.FileStorage,
	}, opts.Replicas, opts.Logger)
	if err != nil {
		return nil, fmt.Errorf("jwtauth: %w", err)
	}
	life, stop := context.WithCancel(context.Background())
	r := &Revocations{kv: kv, ttl: opts.TTL, log: opts.Logger, audit: opts.Audit, jti: map[string]revRevocation{},
		subs: map[string]revRevocation{}, stop: stop, done: make(chan struct{})}
	synced := make(chan struct{})
	go func() {
		defer close(r.done)
		bus.FollowKV(life, js.Conn(), kv, bus.KVHandler{
			// A snapshot is the bucket as it is: it replaces whatever
			// this instance held (after a bucket was made again its
			// revisions start over).
			Snapshot: func(entries map[string]jetstream.KeyValueEntry) {
				jti, subs := map[string]revRevocation{}, map[string]revRevocation{}
				for _, e := range entries {
					if rv, ok := r.decode(e); ok && rv.Kind == model.RevokeJTI {
						jti[rv.Value] = revRevocation{rv, e.Revision()}
					} else if ok {
						subs[subKey(rv.Issuer, rv.Value)] = revRevocation{rv, e.Revision()}
					}
				}
				r.mu.Lock()
				r.jti, r.subs = jti, subs
				r.mu.Unlock()
			},
			Update: r.apply,
			Ready:  sync.OnceFunc(func() { close(synced) }),
		}, bus.KVFollowOptions{Logger: opts.Logger})
	}()
	select {
	case <-synced:
		return r, nil
	case <-ctx.Done():
		r.Close()
		return nil, fmt.Errorf("jwtauth: loading the token revocation list: %w", ctx.Err())
	}
}

// Close stops watching.
func (r *Revocations) Close() {
	r.stop()
	<-r.done
}

func (r *Revocations) decode(e jetstream.KeyValueEntry) (model.TokenRevocation, bool) {
	var rv model.TokenRevocation
	if err := json.Unmarshal(e.Value(), &rv); err != nil || (rv.Kind != model.RevokeJTI && rv.Kind != model.RevokeSub) || rv.Value == "" {
		r.log.Warn("ignoring a malformed token revocation", "key", e.Key())
		return model.TokenRevocation{}, false
	}
	return rv, true
}

// apply takes one change of the bucket (a put; deletes and the TTL's
// expiries need no action: an entry past ExpiresAt is ignored anyway).
func (r *Revocations) apply(e jetstream.KeyValueEntry) {
	if e.Operation() != jetstream.KeyValuePut {
		return
	}
	if rv, ok := r.decode(e); ok {
		r.set(rv, e.Revision())
		r.mu.RLock()
		on := r.on
		r.mu.RUnlock()
		for _, fn := range on {
			fn(rv)
		}
	}
}

// OnRevoke registers fn to be told each revocation made from now on, on
// any instance (the bucket is watched), so that what the revoked tokens
// started ends (their OAuth flows).
func (r *Revocations) OnRevoke(fn func(model.TokenRevocation)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on = append(r.on, fn)
}

// set puts rv, written at revision rev, in force unless a newer write of
// its key is: Revoke applies its own write when the bucket acknowledges
// it, and by then the watch may have applied another instance's later
// write of the same key (the same subject revoked at once through two
// instances), which must not be undone: that instance, and every other,
// holds the later one.
func (r *Revocations) set(rv model.TokenRevocation, rev uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, key := r.subs, subKey(rv.Issuer, rv.Value)
	if rv.Kind == model.RevokeJTI {
		m, key = r.jti, rv.Value
	}
	if cur, ok := m[key]; ok && cur.rev >= rev {
		return
	}
	m[key] = revRevocation{rv, rev}
}

// subKey is the key of a subject's revocation in subs: the subject alone
// for every issuer's, else the issuer with it (neither holds a control
// character).
func subKey(issuer, subject string) string {
	if issuer == "" {
		return subject
	}
	return issuer + "\n" + subject
}

// revocationKey is the bucket key of a revocation.
func revocationKey(kind, value string) string {
	sum := sha256.Sum256([]byte(value))
	return kind + "." + hex.EncodeToString(sum[:])
}

// Revoke adds a revocation: req names a jti or a subject (exactly one); by
// says who (an API key id, "bus"). It is in force here at once, on every
// other instance when their watch delivers it.
func (r *Revocations) Revoke(ctx context.Context, req model.TokenRevokeRequest, by string) (model.TokenRevocation, error) {
	kind, value := model.RevokeJTI, req.JTI
	switch {
	case req.JTI != "" && req.Sub != "":
		return model.TokenRevocation{}, apierr.Invalid("jti", "give jti or sub, not both")
	case req.Sub != "":
		kind, value = model.RevokeSub, req.Sub
	case req.JTI == "":
		return model.TokenRevocation{}, apierr.Invalid("jti", "give the jti of one access token or the sub whose tokens to revoke")
	case req.Iss != "" && req.Sub == "":
		return model.TokenRevocation{}, apierr.Invalid("iss", "iss names the issuer of a sub: give it with sub")
	}
	// In order: with both bad, the field named is always the same one.
	for _, f := range [][2]string{{kind, value}, {"iss", req.Iss}} {
		field, v := f[0], f[1]
		if strings.TrimSpace(v) != v || len(v) > maxRevokeValue || strings.ContainsFunc(v, func(c rune) bool { return c < 0x20 || c == 0x7f }) {
			return model.TokenRevocation{}, apierr.Invalid(field, fmt.Sprintf("%s must be at most %d characters, without control characters or surrounding spaces", field, maxRevokeValue))
		}
	}
	now := time.Now().UTC()
	rv := model.TokenRevocation{Kind: kind, Value: value, Issuer: req.Iss, RevokedAt: now, ExpiresAt: now.Add(r.ttl), By: by}
	data, err := json.Marshal(rv)
	if err != nil {
		return model.TokenRevocation{}, apierr.Wrap(apierr.Internal, "encoding the revocation", err)
	}
	rev, err := r.kv.Put(ctx, revocationKey(kind, subKey(req.Iss, value)), data)
	if err != nil {
		return model.TokenRevocation{}, bus.JetStreamErr("storing the revocation", err)
	}
	r.set(rv, rev)
	r.log.Info("OAuth access tokens revoked", "kind", kind, "value", value, "issuer", req.Iss, "by", by)
	r.audit.Record(model.GatewayAuditEvent{Action: model.GatewayTokensRevoked, Principal: principal.Actor(ctx), RevokeKind: kind, RevokeValue: value, RevokeIssuer: req.Iss})
	r.mu.RLock()
	hooks := slices.Clone(r.onStored)
	r.mu.RUnlock()
	for _, fn := range hooks {
		fn(rv)
	}
	return rv, nil
}

// Check refuses a token that is revoked: its jti, or its subject (of any
// issuer, or of the token's) with a revocation made at or after the
// token's iat (a token without iat counts as issued before). UNAUTHORIZED,
// with the reason.
func (r *Revocations) Check(jti, issuer, subject string, iat time.Time) error {
	now := time.Now()
	r.mu.RLock()
	defer r.mu.RUnlock()
	if rv, ok := r.jti[jti]; ok && jti != "" && now.Before(rv.ExpiresAt) {
		return apierr.Newf(apierr.Unauthorized, "invalid access token: it was revoked at %s", rv.RevokedAt.Format(time.RFC3339))
	}
	for _, key := range []string{subject, subKey(issuer, subject)} {
		if rv, ok := r.subs[key]; ok && now.Before(rv.ExpiresAt) && (iat.IsZero() || !iat.After(rv.RevokedAt)) {
			return apierr.Newf(apierr.Unauthorized, "invalid access token: the tokens of %s issued up to %s were revoked; get a new one", subject, rv.RevokedAt.Format(time.RFC3339))
		}
	}
	return nil
}
