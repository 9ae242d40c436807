package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/bus"
)

// BucketCache is the JetStream KV bucket holding registry answers, shared by
// every registry service instance.
const BucketCache = "mcp_registry_cache"

// cacheOpTimeout bounds one cache read or write: the cache only speeds
// things up, it must never hold a request back.
const cacheOpTimeout = 2 * time.Second

// cache keeps raw registry answers by URL. An entry is fresh for ttl; older
// entries stay (until the bucket's max age) to be served, marked stale, when
// the registry is down.
type cache struct {
	kv  jetstream.KeyValue // nil: no cache
	ttl time.Duration
	now func() time.Time
	log *slog.Logger
}

type cacheEntry struct {
	FetchedAt time.Time       `json:"fetched_at"`
	URL       string          `json:"url"`
	Body      json.RawMessage `json:"body"`
}

// ensureCacheBucket creates or updates the bucket (waiting for JetStream as
// long as ctx allows); maxAge is how long a stale answer may stand in.
func ensureCacheBucket(ctx context.Context, js jetstream.JetStream, maxAge time.Duration, replicas int, log *slog.Logger) (jetstream.KeyValue, error) {
	return bus.EnsureKV(ctx, js, jetstream.KeyValueConfig{
		Bucket:      BucketCache,
		Description: "registry answers by URL hash (fresh for the cache TTL, served stale while a registry is down)",
		History:     1,
		TTL:         maxAge,
		Storage:     jetstream.FileStorage,
	}, replicas, log)
}

// cacheKey is KV-safe whatever the URL holds: source.<sha256 of the URL>.
func cacheKey(source, rawURL string) string {
	sum := sha256.Sum256([]byte(rawURL))
	return source + "." + hex.EncodeToString(sum[:])
}

// get returns the entry for the URL, if any, and whether it is still fresh.
func (c *cache) get(ctx context.Context, source, rawURL string) (*cacheEntry, bool) {
	if c.kv == nil {
		return nil, false
	}
	ctx, cancel := context.WithTimeout(ctx, cacheOpTimeout)
	defer cancel()
	e, err := c.kv.Get(ctx, cacheKey(source, rawURL))
	if err != nil {
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			c.log.Warn("registry cache read failed", "source", source, "error", err)
		}
		return nil, false
	}
	var ce cacheEntry
	if err := json.Unmarshal(e.Value(), &ce); err != nil || ce.URL != rawURL {
		return nil, false // unreadable, or a hash collision
	}
	return &ce, c.now().Sub(ce.FetchedAt) < c.ttl
}

// put stores a registry answer; failures are logged, never returned.
func (c *cache) put(ctx context.Context, source, rawURL string, body []byte) {
	if c.kv == nil {
		return
	}
	data, err := json.Marshal(cacheEntry{FetchedAt: c.now().UTC(), URL: rawURL, Body: body})
	if err != nil {
		return
	}
	// Detached from the request: a request that timed out still fills the cache.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cacheOpTimeout)
	defer cancel()
	if _, err := c.kv.Put(ctx, cacheKey(source, rawURL), data); err != nil {
		c.log.Warn("registry cache write failed", "source", source, "bytes", len(data), "error", err)
	}
}
