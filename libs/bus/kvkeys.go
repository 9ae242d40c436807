package bus

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// WholeKeys wraps kv so that its key listings (Keys, ListKeys,
// ListKeysFiltered) miss no key that exists throughout the listing.
//
// nats.go lists keys with a watcher that stops once it has had as many
// messages as were pending when it began. In a bucket that keeps one value
// per key, a key rewritten meanwhile loses the message the watcher was to
// read, and its new one comes after the stop: the key is not listed
// (TestKeysListsAKeyRewrittenMeanwhile). A status rewritten each second, a
// task running, a config being saved all vanished from lists that way.
//
// The stream's subjects, read in one request after the watcher, hold every
// key that has a message; those the watcher did not see at all are read
// one by one, and listed unless deleted.
func WholeKeys(js jetstream.JetStream, kv jetstream.KeyValue) jetstream.KeyValue {
	if _, ok := kv.(wholeKeys); ok {
		return kv
	}
	return wholeKeys{KeyValue: kv, js: js}
}

// BindKV looks up an existing bucket, its listings whole (WholeKeys).
func BindKV(ctx context.Context, js jetstream.JetStream, bucket string) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, err
	}
	return WholeKeys(js, kv), nil
}

type wholeKeys struct {
	jetstream.KeyValue
	js jetstream.JetStream
}

func (w wholeKeys) Keys(ctx context.Context, opts ...jetstream.WatchOpt) ([]string, error) {
	keys, err := w.list(ctx, []string{">"}, opts)
	if err == nil && len(keys) == 0 {
		return nil, jetstream.ErrNoKeysFound
	}
	return keys, err
}

func (w wholeKeys) ListKeys(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyLister, error) {
	keys, err := w.list(ctx, []string{">"}, opts)
	if err != nil {
		return nil, err
	}
	return listed(keys), nil
}

func (w wholeKeys) ListKeysFiltered(ctx context.Context, filters ...string) (jetstream.KeyLister, error) {
	if len(filters) == 0 {
		filters = []string{">"}
	}
	keys, err := w.list(ctx, filters, nil)
	if err != nil {
		return nil, err
	}
	return listed(keys), nil
}

// list is the watcher's keys under filters and those of the stream's
// subjects it did not see that are not deleted, sorted.
func (w wholeKeys) list(ctx context.Context, filters []string, opts []jetstream.WatchOpt) ([]string, error) {
	seen, err := w.watched(ctx, filters, opts)
	if err != nil {
		return nil, err
	}
	var keys []string
	for k, live := range seen {
		if live {
			keys = append(keys, k)
		}
	}
	stream, err := w.js.Stream(ctx, "KV_"+w.Bucket())
	if err != nil {
		return nil, fmt.Errorf("looking up bucket %s: %w", w.Bucket(), err)
	}
	prefix := "$KV." + w.Bucket() + "."
	for _, f := range filters {
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(prefix+f))
		if err != nil {
			return nil, fmt.Errorf("reading the keys of bucket %s: %w", w.Bucket(), err)
		}
		for subject := range info.State.Subjects {
			key := strings.TrimPrefix(subject, prefix)
			if _, ok := seen[key]; ok {
				continue
			}
			seen[key] = true
			_, err := w.Get(ctx, key)
			switch {
			case err == nil:
				keys = append(keys, key)
			case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
			default:
				return nil, fmt.Errorf("reading key %s of bucket %s: %w", key, w.Bucket(), err)
			}
		}
	}
	slices.Sort(keys) // in a stable order, where the watcher gave them by revision
	return keys, nil
}

// watched is what a watcher of filters sees until it has had the values
// pending when it began: each key, true if its last operation seen is a
// put. Deleted keys are kept (false), so their markers, which stay in the
// stream, are not read again one by one.
func (w wholeKeys) watched(ctx context.Context, filters []string, opts []jetstream.WatchOpt) (map[string]bool, error) {
	// nats.go writes the subjects into the filters it is given.
	watcher, err := w.KeyValue.WatchFiltered(ctx, slices.Clone(filters), append(slices.Clone(opts), jetstream.MetaOnly())...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = watcher.Stop() }()
	seen := map[string]bool{}
	for e := range watcher.Updates() {
		if e == nil {
			return seen, nil
		}
		seen[e.Key()] = e.Operation() == jetstream.KeyValuePut
	}
	// Closed before the initial values ended: ctx did.
	return nil, cmp.Or(ctx.Err(), errors.New("the key watcher stopped"))
}

// drain reads a lister to its end and stops it.
func drain(lister jetstream.KeyLister) []string {
	defer func() { _ = lister.Stop() }()
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	return keys
}

// listed is a KeyLister over keys already read.
func listed(keys []string) jetstream.KeyLister {
	ch := make(chan string, len(keys))
	for _, k := range keys {
		ch <- k
	}
	close(ch)
	return keyList(ch)
}
