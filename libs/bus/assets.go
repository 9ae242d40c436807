package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Assets are the JetStream stream and KV buckets every service shares.
type Assets struct {
	Events jetstream.Stream
	// Audit holds the audit chains (append-only: AuditStream).
	Audit   jetstream.Stream
	Configs jetstream.KeyValue
	Status  jetstream.KeyValue
	Tools   jetstream.KeyValue
	// Slugs reserves each slug for one config id (key slug, value id), so two
	// config service instances cannot create the same slug at once.
	Slugs jetstream.KeyValue
	// Owners holds the runners' leases and heartbeats; its TTL is the lease TTL.
	Owners jetstream.KeyValue
	// Agents holds what the runners check agents' requests against.
	Agents jetstream.KeyValue
	// Pins holds the pinned tool definitions.
	Pins jetstream.KeyValue
}

// AssetOptions size the shared assets; zero values take the defaults.
type AssetOptions struct {
	// Replicas of the stream and buckets (1 embedded, 3 on a cluster).
	Replicas int
	// EventsMaxAge and EventsMaxBytes bound the event stream (default 7
	// days, DefaultEventsMaxBytes). An existing stream's larger bound is
	// kept (FitStream).
	EventsMaxAge   time.Duration
	EventsMaxBytes int64
	// AuditMaxAge and AuditMaxBytes bound the audit stream (default 365
	// days, DefaultAuditMaxBytes): past them its oldest records age out, the only way any
	// leave it.
	AuditMaxAge   time.Duration
	AuditMaxBytes int64
	// LeaseTTL is how long an ownership lease lives unless renewed (default 5s).
	LeaseTTL time.Duration
	// Logger hears what start-up waits for (nil: nothing is logged).
	Logger *slog.Logger
}

// The default bounds of the shared streams (AssetOptions). With the chat's
// (3 GiB) they stay under what a server offers on a half-full disk; on a
// smaller one mcpbus up scales them down together (Budget).
const (
	DefaultEventsMaxBytes = 1 << 30
	DefaultAuditMaxBytes  = 1 << 30
)

// EnsureAssets creates or updates the shared stream and buckets; every
// service calls it at start, so the first one up creates them. It retries
// until ctx ends (see Setup): concurrent creators all succeed. A create
// whose answer is lost counts once the asset has a leader (CreateAsset).
func EnsureAssets(ctx context.Context, js jetstream.JetStream, subjects Subjects, opts AssetOptions) (*Assets, error) {
	if opts.Replicas <= 0 {
		opts.Replicas = 1
	}
	if opts.EventsMaxAge <= 0 {
		opts.EventsMaxAge = 7 * 24 * time.Hour
	}
	if opts.EventsMaxBytes <= 0 {
		opts.EventsMaxBytes = DefaultEventsMaxBytes
	}
	if opts.AuditMaxAge <= 0 {
		opts.AuditMaxAge = 365 * 24 * time.Hour
	}
	if opts.AuditMaxBytes <= 0 {
		opts.AuditMaxBytes = DefaultAuditMaxBytes
	}
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = 5 * time.Second
	}
	a := &Assets{}
	events := func(ctx context.Context) error {
		return Setup(ctx, opts.Logger, "stream "+StreamEvents, func(ctx context.Context) error {
			var err error
			a.Events, err = ensureStream(ctx, js, jetstream.StreamConfig{
				Name:        StreamEvents,
				Description: "mcpbus events: status, config, call (audit) and chat",
				Subjects:    []string{subjects.Events()},
				Storage:     jetstream.FileStorage,
				Retention:   jetstream.LimitsPolicy,
				MaxAge:      opts.EventsMaxAge,
				MaxBytes:    opts.EventsMaxBytes,
				Discard:     jetstream.DiscardOld,
				Replicas:    keepReplicas(ctx, js, StreamEvents, opts.Replicas),
			}, opts.Logger)
			return err
		})
	}
	audit := func(ctx context.Context, maxBytes int64) error {
		return Setup(ctx, opts.Logger, "stream "+StreamAudit, func(ctx context.Context) error {
			cfg := AuditStream(subjects, opts.AuditMaxAge, maxBytes)
			cfg.Replicas = keepReplicas(ctx, js, StreamAudit, opts.Replicas)
			var err error
			// Created, never updated: no identity may update it (the table).
			a.Audit, err = CreateAsset(ctx, js, StreamAudit,
				func(ctx context.Context) (jetstream.Stream, error) {
					create := func(ctx context.Context, maxBytes int64) (jetstream.Stream, error) {
						cfg.MaxBytes = maxBytes
						return js.CreateStream(ctx, cfg)
					}
					st, err := FitMaxBytes(ctx, opts.Logger, "stream "+StreamAudit, cfg.MaxBytes, create, StreamBound(js, StreamAudit))
					if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
						return js.Stream(ctx, StreamAudit)
					}
					return st, err
				},
				func(ctx context.Context) (jetstream.Stream, error) { return js.Stream(ctx, StreamAudit) })
			return err
		})
	}
	buckets := []struct {
		kv  *jetstream.KeyValue
		cfg jetstream.KeyValueConfig
	}{
		{&a.Configs, jetstream.KeyValueConfig{Bucket: BucketConfigs, History: 16, Description: "McpConfig records by id, with history for rollback"}},
		{&a.Status, jetstream.KeyValueConfig{Bucket: BucketStatus, History: 1, Description: "latest status per server slug"}},
		{&a.Tools, jetstream.KeyValueConfig{Bucket: BucketTools, History: 1, Description: "tool catalog per running server slug"}},
		{&a.Slugs, jetstream.KeyValueConfig{Bucket: BucketSlugs, History: 1, Description: "slug reservations: slug -> config id"}},
		// Leases expire with the bucket's TTL; the limit markers make an
		// expiry visible to watchers as a delete, so a takeover starts at once.
		{&a.Owners, jetstream.KeyValueConfig{Bucket: BucketOwners, History: 1, TTL: opts.LeaseTTL, LimitMarkerTTL: opts.LeaseTTL,
			Description: "runner leases (server.<slug>.<replica>) and heartbeats (runner.<id>)"}},
		{&a.Agents, AgentsKV()},
		{&a.Pins, jetstream.KeyValueConfig{Bucket: BucketPins, History: 4, Description: "pinned tool definitions by <server id>.<tool> (model.ToolPin)"}},
	}
	// The assets are independent: made at once, start-up waits for the
	// slowest instead of the sum (each R3 create is one group election).
	// The two streams are the exception: on a server with too little
	// storage each is fitted to what is left (FitMaxBytes), and two fitted
	// at once both saw the same room and together reserved more than the
	// server had (TestAssetsFitASmallServer failed one run in six).
	// The audit stream cannot be made smaller once made (no identity may
	// update it), so it would keep all that fit at its first try, half of
	// what was left, and leave too little for the chat's streams and the
	// buckets (TestUpOnASmallDisk failed so, one run in two). When the
	// events stream had to be made smaller, the audit stream asks no more
	// than the events stream got.
	streams := func(ctx context.Context) error {
		if err := events(ctx); err != nil {
			return err
		}
		auditMax := opts.AuditMaxBytes
		if got := a.Events.CachedInfo().Config.MaxBytes; got > 0 && got < opts.EventsMaxBytes {
			auditMax = min(auditMax, got)
		}
		if err := audit(ctx, auditMax); err != nil {
			return err
		}
		if got := a.Audit.CachedInfo().Config.MaxBytes; auditMax < opts.AuditMaxBytes && got > 0 && got <= auditMax && opts.Logger != nil {
			opts.Logger.Warn(fmt.Sprintf("stream %s: the NATS server has no room for the %s asked: bounded at %s, as the events stream was; for the full size, %s",
				StreamAudit, Size(opts.AuditMaxBytes), Size(got), StorageAdvice),
				"step", "stream "+StreamAudit, "asked_bytes", opts.AuditMaxBytes, "max_bytes", got)
		}
		return nil
	}
	steps := []func(context.Context) error{streams}
	for _, b := range buckets {
		b.cfg.Storage = jetstream.FileStorage
		steps = append(steps, func(ctx context.Context) (err error) {
			*b.kv, err = EnsureKV(ctx, js, b.cfg, opts.Replicas, opts.Logger)
			return err
		})
	}
	errs := make([]error, len(steps))
	var wg sync.WaitGroup
	for i, step := range steps {
		wg.Go(func() { errs[i] = step(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return a, nil
}

// EnsureKV creates or updates a bucket with replicas (never fewer than it
// has), retrying until ctx ends; a bucket another service made with other
// settings is used as it is.
func EnsureKV(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig, replicas int, log *slog.Logger) (kv jetstream.KeyValue, err error) {
	err = Setup(ctx, log, "bucket "+cfg.Bucket, func(ctx context.Context) error {
		cfg.Replicas = keepReplicas(ctx, js, "KV_"+cfg.Bucket, replicas)
		kv, err = ensureKV(ctx, js, cfg, log)
		return err
	})
	return kv, err
}

// EnsureStream creates or updates a stream with replicas (never fewer than
// it has), retrying until ctx ends, as EnsureKV does for buckets.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig, replicas int, log *slog.Logger) (st jetstream.Stream, err error) {
	err = Setup(ctx, log, "stream "+cfg.Name, func(ctx context.Context) error {
		cfg.Replicas = keepReplicas(ctx, js, cfg.Name, replicas)
		st, err = ensureStream(ctx, js, cfg, log)
		return err
	})
	return st, err
}

// ensureStream creates or updates a stream; one another service created with
// other settings is used as it is. A new stream's MaxBytes is fitted to the
// storage the server has left (FitMaxBytes).
func ensureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig, log *slog.Logger) (jetstream.Stream, error) {
	return CreateAsset(ctx, js, cfg.Name,
		func(ctx context.Context) (jetstream.Stream, error) {
			if cfg.MaxBytes <= 0 {
				return js.CreateOrUpdateStream(ctx, cfg)
			}
			return FitStream(ctx, js, cfg, log)
		},
		func(ctx context.Context) (jetstream.Stream, error) { return js.Stream(ctx, cfg.Name) })
}

// keepReplicas never lowers the replicas of an existing stream: a service
// started with the default of 1 must not undo a cluster's redundancy. An
// info request about a stream being made goes unanswered: replicasLookup
// bounds it.
const replicasLookup = 500 * time.Millisecond

func keepReplicas(ctx context.Context, js jetstream.JetStream, stream string, want int) int {
	ctx, cancel := context.WithTimeout(ctx, replicasLookup)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return want
	}
	if have := st.CachedInfo().Config.Replicas; have > want {
		return have
	}
	return want
}

// ensureKV creates or updates a bucket; one another service made with other
// settings (history, replicas) is used as it is. A bucket with MaxBytes is
// fitted as a stream is (FitMaxBytes; an existing one keeps a larger bound).
func ensureKV(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig, log *slog.Logger) (jetstream.KeyValue, error) {
	stream := "KV_" + cfg.Bucket
	kv, err := CreateAsset(ctx, js, stream,
		func(ctx context.Context) (jetstream.KeyValue, error) {
			if cfg.MaxBytes <= 0 {
				return js.CreateOrUpdateKeyValue(ctx, cfg)
			}
			return FitMaxBytes(ctx, log, "bucket "+cfg.Bucket, KeepBound(ctx, js, stream, cfg.MaxBytes),
				func(ctx context.Context, maxBytes int64) (jetstream.KeyValue, error) {
					c := cfg
					c.MaxBytes = maxBytes
					return js.CreateOrUpdateKeyValue(ctx, c)
				}, StreamBound(js, stream))
		},
		func(ctx context.Context) (jetstream.KeyValue, error) { return js.KeyValue(ctx, cfg.Bucket) })
	if err != nil {
		return nil, err
	}
	return WholeKeys(js, kv), nil
}

// FitStream creates or updates a stream, a new one with its MaxBytes fitted
// to the storage the server has left (FitMaxBytes). An existing stream
// with a larger bound keeps it (KeepBound).
func FitStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig, log *slog.Logger) (jetstream.Stream, error) {
	cfg.MaxBytes = KeepBound(ctx, js, cfg.Name, cfg.MaxBytes)
	return FitMaxBytes(ctx, log, "stream "+cfg.Name, cfg.MaxBytes,
		func(ctx context.Context, maxBytes int64) (jetstream.Stream, error) {
			cfg.MaxBytes = maxBytes
			return js.CreateOrUpdateStream(ctx, cfg)
		}, StreamBound(js, cfg.Name))
}

// KeepBound is the bound to ask of stream: maxBytes, or the stream's own
// when it exists with a larger one. Lowering a stream's MaxBytes drops its
// oldest records at once, and a smaller ask is no choice of the operator's:
// it is a default, or mcpbus up's share of a disk that has since filled
// (Budget). A larger bound the server has no room for any more is kept
// as it is: it was reserved when the stream was made.
func KeepBound(ctx context.Context, js jetstream.JetStream, stream string, maxBytes int64) int64 {
	if have, found := StreamBound(js, stream)(ctx); found && have > maxBytes && maxBytes > 0 {
		return have
	}
	return maxBytes
}

// StreamBound is a bounded lookup of a stream's MaxBytes (FitMaxBytes's
// bound): found is false only for a stream that does not exist; an
// unanswered lookup counts as found with an unknown bound (0), so nothing
// is fitted on a guess.
func StreamBound(js jetstream.JetStream, name string) func(context.Context) (int64, bool) {
	return func(ctx context.Context) (int64, bool) {
		ctx, cancel := context.WithTimeout(ctx, createLookup)
		defer cancel()
		st, err := js.Stream(ctx, name)
		if err != nil {
			return 0, !errors.Is(err, jetstream.ErrStreamNotFound)
		}
		return st.CachedInfo().Config.MaxBytes, true
	}
}

// AgentsKV is the configuration of the agents' bucket (the host that makes
// agents may create it before any other service runs).
func AgentsKV() jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{Bucket: BucketAgents, History: 1, Storage: jetstream.FileStorage,
		Description: "agent records: the tools each agent may call (model.AgentRecord)"}
}

// AuditStream is the configuration of the audit stream: append-only
// (DenyDelete, DenyPurge), duplicates within two minutes dropped (a
// writer's retry after a lost ack), direct gets so a writer reads its
// chain's head with a get by subject.
func AuditStream(subjects Subjects, maxAge time.Duration, maxBytes int64) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        StreamAudit,
		Description: "mcpbus audit chains: signed, hash-chained records of call, tool_changed, config, credential and chat audit events",
		Subjects:    []string{subjects.AuditAll()},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      maxAge,
		MaxBytes:    maxBytes,
		Discard:     jetstream.DiscardOld,
		Duplicates:  2 * time.Minute,
		DenyDelete:  true,
		DenyPurge:   true,
		AllowDirect: true,
	}
}
