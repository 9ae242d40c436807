package approvals

import (
	"context"
	"encoding/json"

	"github.com/nats-io/nats.go/jetstream"
)

// Calls awaiting approval and inputs awaiting an answer are both records
// of this bucket that an answer fills in (a decision, an action) and that
// the asker deletes once it has read it. answer says what a record was
// answered with ("" while it waits).

// unanswered reads the records of the keys matching pattern that still
// wait, in no order: a key a lister repeats is read once, and one answered
// and deleted meanwhile is skipped.
func unanswered[T any](ctx context.Context, kv jetstream.KeyValue, pattern string, answer func(*T) string) ([]T, error) {
	lister, err := kv.ListKeysFiltered(ctx, pattern)
	if err != nil {
		return nil, err
	}
	var out []T
	seen := map[string]bool{}
	for key := range lister.Keys() {
		if seen[key] {
			continue
		}
		seen[key] = true
		e, err := kv.Get(ctx, key)
		if err != nil {
			continue
		}
		var r T
		if json.Unmarshal(e.Value(), &r) != nil || answer(&r) != "" {
			continue
		}
		out = append(out, r)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// answeredBefore is what key's newest record was answered with when the
// asker has deleted it already ("" if none), so that a late answer learns
// the earlier one.
func answeredBefore[T any](ctx context.Context, kv jetstream.KeyValue, key string, answer func(*T) string) string {
	hist, err := kv.History(ctx, key)
	if err != nil {
		return ""
	}
	for i := len(hist) - 1; i >= 0; i-- {
		if hist[i].Operation() != jetstream.KeyValuePut {
			continue
		}
		var r T
		if json.Unmarshal(hist[i].Value(), &r) == nil {
			return answer(&r)
		}
		return ""
	}
	return ""
}
