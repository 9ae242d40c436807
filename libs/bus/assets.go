package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Assets are the JetStream stream and KV buckets every service shares.
type Assets struct {
	Events  jetstream.Stream
	Configs jetstream.KeyValue
	Status  jetstream.KeyValue
	Tools   jetstream.KeyValue
	// Slugs reserves each slug for one config id (key slug, value id), so two
	// config service instances cannot create the same slug at once.
	Slugs jetstream.KeyValue
	// Owners holds the runners' leases and heartbeats; its TTL is the lease TTL.
	Owners jetstream.KeyValue
}

// AssetOptions size the shared assets; zero values take the defaults.
type AssetOptions struct {
	// Replicas of the stream and buckets (1 embedded, 3 on a cluster).
	Replicas int
	// EventsMaxAge and EventsMaxBytes bound the event stream (default 7 days, 1 GiB).
	EventsMaxAge   time.Duration
	EventsMaxBytes int64
	// LeaseTTL is how long an ownership lease lives unless renewed (default 5s).
	LeaseTTL time.Duration
}

// EnsureAssets creates or updates the shared stream and buckets; every
// service calls it at start, so the first one up creates them.
func EnsureAssets(ctx context.Context, js jetstream.JetStream, subjects Subjects, opts AssetOptions) (*Assets, error) {
	if opts.Replicas <= 0 {
		opts.Replicas = 1
	}
	if opts.EventsMaxAge <= 0 {
		opts.EventsMaxAge = 7 * 24 * time.Hour
	}
	if opts.EventsMaxBytes <= 0 {
		opts.EventsMaxBytes = 1 << 30
	}
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = 5 * time.Second
	}
	a := &Assets{}
	var err error
	a.Events, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        StreamEvents,
		Description: "mcpbus events: status, config, call (audit) and chat",
		Subjects:    []string{subjects.Events()},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      opts.EventsMaxAge,
		MaxBytes:    opts.EventsMaxBytes,
		Discard:     jetstream.DiscardOld,
		Replicas:    keepReplicas(ctx, js, StreamEvents, opts.Replicas),
	})
	if err != nil {
		return nil, fmt.Errorf("ensuring stream %s: %w", StreamEvents, err)
	}
	buckets := []struct {
		kv      *jetstream.KeyValue
		name    string
		history uint8
		desc    string
	}{
		{&a.Configs, BucketConfigs, 16, "McpConfig records by id, with history for rollback"},
		{&a.Status, BucketStatus, 1, "latest status per server slug"},
		{&a.Tools, BucketTools, 1, "tool catalog per running server slug"},
		{&a.Slugs, BucketSlugs, 1, "slug reservations: slug -> config id"},
	}
	for _, b := range buckets {
		kv, err := ensureKV(ctx, js, jetstream.KeyValueConfig{
			Bucket: b.name, Description: b.desc, History: b.history,
			Storage: jetstream.FileStorage, Replicas: keepReplicas(ctx, js, "KV_"+b.name, opts.Replicas),
		})
		if err != nil {
			return nil, err
		}
		*b.kv = kv
	}
	// Leases expire with the bucket's TTL; the limit markers make an expiry
	// visible to watchers as a delete, so a takeover starts at once.
	a.Owners, err = ensureKV(ctx, js, jetstream.KeyValueConfig{
		Bucket: BucketOwners, Description: "runner leases (server.<slug>.<replica>) and heartbeats (runner.<id>)",
		History: 1, TTL: opts.LeaseTTL, LimitMarkerTTL: opts.LeaseTTL,
		Storage: jetstream.FileStorage, Replicas: keepReplicas(ctx, js, "KV_"+BucketOwners, opts.Replicas),
	})
	if err != nil {
		return nil, err
	}
	return a, nil
}

// keepReplicas never lowers the replicas of an existing stream: a service
// started with the default of 1 must not undo a cluster's redundancy.
func keepReplicas(ctx context.Context, js jetstream.JetStream, stream string, want int) int {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return want
	}
	if have := st.CachedInfo().Config.Replicas; have > want {
		return have
	}
	return want
}

func ensureKV(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, cfg)
	if err == nil {
		return kv, nil
	}
	// Another service may have created it with other settings (history, replicas): use it as it is.
	if kv, err2 := js.KeyValue(ctx, cfg.Bucket); err2 == nil {
		return kv, nil
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("ensuring bucket %s: JetStream did not answer: %w", cfg.Bucket, err)
	}
	return nil, fmt.Errorf("ensuring bucket %s: %w", cfg.Bucket, err)
}
