package bus

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrKVWithdrawn is AwaitKV's error when the awaited key is deleted or purged.
var ErrKVWithdrawn = errors.New("the awaited key was withdrawn")

// AwaitKV watches key until answered says a value of it is the awaited one
// (returned with its revision), ctx ends (ctx's error, with the revision last
// seen, for a compare-and-set after a deadline), the key is deleted
// (ErrKVWithdrawn) or the watch fails. It is the one wait of the approvals
// that are decided by compare-and-set on a KV key: the chat's
// (services/chat/approvals) and the gateway's (libs/approvals).
func AwaitKV(ctx context.Context, kv jetstream.KeyValue, key string, answered func([]byte) (bool, error)) ([]byte, uint64, error) {
	w, err := kv.Watch(ctx, key)
	if err != nil {
		if ctx.Err() != nil {
			return nil, 0, ctx.Err()
		}
		return nil, 0, err
	}
	defer func() { _ = w.Stop() }()
	var rev uint64
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				if ctx.Err() != nil {
					return nil, rev, ctx.Err()
				}
				return nil, rev, errors.New("the watch of an awaited key ended")
			}
			if e == nil {
				continue // end of the initial values
			}
			if e.Operation() != jetstream.KeyValuePut {
				return nil, rev, ErrKVWithdrawn
			}
			done, err := answered(e.Value())
			if err != nil {
				return nil, rev, err
			}
			if done {
				return e.Value(), e.Revision(), nil
			}
			rev = e.Revision()
		case <-ctx.Done():
			return nil, rev, ctx.Err()
		}
	}
}
