package bus

import (
	"bytes"
	"context"
	"errors"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
)

// RetryKV wraps kv so that its reads and writes ride out a leader election
// (see Retry): a config write issued right after a NATS node died succeeds
// once the bucket's stream has a new leader, within the caller's deadline.
//
// A retried write whose earlier try went unanswered may have been applied:
// Create and Update then find the key already at the value they write and
// succeed with its revision instead of reporting a conflict; Delete and Purge
// find it gone. Watch and WatchAll are not retried (a watcher lives on; its
// owner restarts it).
func RetryKV(kv jetstream.KeyValue) jetstream.KeyValue {
	if r, ok := kv.(retryKV); ok {
		return r
	}
	return retryKV{kv}
}

type retryKV struct{ jetstream.KeyValue }

func (r retryKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	return RetryValue(ctx, func(ctx context.Context, _ int) (jetstream.KeyValueEntry, error) { return r.KeyValue.Get(ctx, key) })
}

func (r retryKV) GetRevision(ctx context.Context, key string, rev uint64) (jetstream.KeyValueEntry, error) {
	return RetryValue(ctx, func(ctx context.Context, _ int) (jetstream.KeyValueEntry, error) {
		return r.KeyValue.GetRevision(ctx, key, rev)
	})
}

// Put is idempotent: a retry writes the same value again.
func (r retryKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	return RetryValue(ctx, func(ctx context.Context, _ int) (uint64, error) { return r.KeyValue.Put(ctx, key, value) })
}

func (r retryKV) PutString(ctx context.Context, key, value string) (uint64, error) {
	return r.Put(ctx, key, []byte(value))
}

func (r retryKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	return RetryValue(ctx, func(ctx context.Context, try int) (uint64, error) {
		rev, err := r.KeyValue.Create(ctx, key, value, opts...)
		if try > 1 && errors.Is(err, jetstream.ErrKeyExists) {
			return r.mine(ctx, key, value, 0, err)
		}
		return rev, err
	})
}

func (r retryKV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	return RetryValue(ctx, func(ctx context.Context, try int) (uint64, error) {
		rev, err := r.KeyValue.Update(ctx, key, value, last)
		if try > 1 && errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return r.mine(ctx, key, value, last, err)
		}
		return rev, err
	})
}

// mine resolves a conflict met by a retried write: if key holds value at a
// revision after last, an earlier unanswered try wrote it, and that is the
// write's revision; otherwise the conflict stands.
func (r retryKV) mine(ctx context.Context, key string, value []byte, last uint64, conflict error) (uint64, error) {
	e, err := r.KeyValue.Get(ctx, key)
	if err != nil {
		if Transient(err) {
			return 0, err
		}
		return 0, conflict
	}
	if e.Revision() > last && bytes.Equal(e.Value(), value) {
		return e.Revision(), nil
	}
	return 0, conflict
}

func (r retryKV) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	return r.remove(ctx, key, r.KeyValue.Delete, opts)
}

func (r retryKV) Purge(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	return r.remove(ctx, key, r.KeyValue.Purge, opts)
}

// remove runs a delete or purge; a retry that meets a revision mismatch
// (the key moved on: our unanswered try put a marker) succeeds if the key is
// gone.
func (r retryKV) remove(ctx context.Context, key string, op func(context.Context, string, ...jetstream.KVDeleteOpt) error, opts []jetstream.KVDeleteOpt) error {
	return Retry(ctx, func(ctx context.Context, try int) error {
		err := op(ctx, key, opts...)
		if try > 1 && errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			if _, gerr := r.KeyValue.Get(ctx, key); errors.Is(gerr, jetstream.ErrKeyNotFound) {
				return nil
			} else if Transient(gerr) {
				return gerr
			}
		}
		return err
	})
}

// History and Keys read through a watcher that a try's deadline stops
// early, leaving a partial result without an error: such a try counts as
// unanswered.
func (r retryKV) History(ctx context.Context, key string, opts ...jetstream.WatchOpt) ([]jetstream.KeyValueEntry, error) {
	return RetryValue(ctx, func(ctx context.Context, _ int) ([]jetstream.KeyValueEntry, error) {
		h, err := r.KeyValue.History(ctx, key, opts...)
		return h, cut(ctx, err)
	})
}

func (r retryKV) Keys(ctx context.Context, opts ...jetstream.WatchOpt) ([]string, error) {
	return RetryValue(ctx, func(ctx context.Context, _ int) ([]string, error) {
		keys, err := r.KeyValue.Keys(ctx, opts...)
		return keys, cut(ctx, err)
	})
}

// ListKeys reads all keys (Keys, retried) before it returns them.
func (r retryKV) ListKeys(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyLister, error) {
	keys, err := r.Keys(ctx, opts...)
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, err
	}
	return listed(keys), nil
}

// ListKeysFiltered reads the keys under filters (retried) before it returns
// them.
func (r retryKV) ListKeysFiltered(ctx context.Context, filters ...string) (jetstream.KeyLister, error) {
	keys, err := RetryValue(ctx, func(ctx context.Context, _ int) ([]string, error) {
		lister, err := r.KeyValue.ListKeysFiltered(ctx, slices.Clone(filters)...) // nats.go writes into them
		if err != nil {
			return nil, err
		}
		return drain(lister), cut(ctx, nil)
	})
	if err != nil {
		return nil, err
	}
	return listed(keys), nil
}

func (r retryKV) Status(ctx context.Context) (jetstream.KeyValueStatus, error) {
	return RetryValue(ctx, func(ctx context.Context, _ int) (jetstream.KeyValueStatus, error) { return r.KeyValue.Status(ctx) })
}

// cut turns a result read while ctx ended into ctx's error.
func cut(ctx context.Context, err error) error {
	if err == nil || errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrNoKeysFound) {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
	}
	return err
}

// keyList is a KeyLister over keys already read (listed).
type keyList chan string

func (k keyList) Keys() <-chan string { return k }
func (k keyList) Stop() error         { return nil }

// Retrying is a copy of a whose buckets are wrapped by RetryKV, for a
// service whose writes are requests with a caller waiting (the config
// service); the stream is shared as it is.
func (a *Assets) Retrying() *Assets {
	c := *a
	for _, kv := range []*jetstream.KeyValue{&c.Configs, &c.Status, &c.Tools, &c.Slugs, &c.Owners, &c.Agents} {
		if *kv != nil {
			*kv = RetryKV(*kv)
		}
	}
	return &c
}
