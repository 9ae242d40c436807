package bus_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

func TestTransient(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{jetstream.ErrNoStreamResponse, true},
		{fmt.Errorf("reserving slug e: %w", jetstream.ErrNoStreamResponse), true},
		{nats.ErrNoResponders, true},
		{nats.ErrTimeout, true},
		{context.DeadlineExceeded, true},
		{&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, true},
		{&jetstream.APIError{Code: 503, ErrorCode: 10163, Description: "expected last sequence per subject temporarily unavailable"}, true},
		{context.Canceled, false},
		{jetstream.ErrKeyExists, false},
		{jetstream.ErrKeyRevisionMismatch, false},
		{jetstream.ErrKeyNotFound, false},
		{&jetstream.APIError{Code: 503, ErrorCode: 10023, Description: "insufficient resources"}, false},
		{errors.New("other"), false},
	} {
		if got := bus.Transient(c.err); got != c.want {
			t.Errorf("Transient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestRetry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Unanswered twice, then answered: three tries, and a try that hangs is
	// cut by its own bound, not the caller's.
	var tries []int
	err := bus.Retry(ctx, func(ctx context.Context, try int) error {
		tries = append(tries, try)
		switch try {
		case 1:
			return jetstream.ErrNoStreamResponse
		case 2:
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	})
	if err != nil || len(tries) != 3 || tries[2] != 3 {
		t.Fatalf("Retry = %v after tries %v, want success on the 3rd", err, tries)
	}

	// A final error is returned at once.
	n := 0
	err = bus.Retry(ctx, func(context.Context, int) error { n++; return jetstream.ErrKeyExists })
	if !errors.Is(err, jetstream.ErrKeyExists) || n != 1 {
		t.Fatalf("Retry of a conflict = %v after %d tries, want the conflict after 1", err, n)
	}

	// The caller's deadline bounds the whole.
	short, cancelShort := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancelShort()
	start := time.Now()
	err = bus.Retry(short, func(context.Context, int) error { return jetstream.ErrNoStreamResponse })
	if !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("Retry past the deadline = %v, want the last error", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Retry returned %s after a 600ms deadline", d)
	}
}

// lossyKV applies a write and then reports it unanswered, once per armed
// operation, as a write sent just before a stream leader died does.
type lossyKV struct {
	jetstream.KeyValue
	lose map[string]bool
}

func (l *lossyKV) lost(op string) bool {
	if l.lose[op] {
		l.lose[op] = false
		return true
	}
	return false
}

func (l *lossyKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	rev, err := l.KeyValue.Create(ctx, key, value, opts...)
	if err == nil && l.lost("create") {
		return 0, jetstream.ErrNoStreamResponse
	}
	return rev, err
}

func (l *lossyKV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	rev, err := l.KeyValue.Update(ctx, key, value, last)
	if err == nil && l.lost("update") {
		return 0, context.DeadlineExceeded
	}
	return rev, err
}

func (l *lossyKV) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	err := l.KeyValue.Delete(ctx, key, opts...)
	if err == nil && l.lost("delete") {
		return nats.ErrTimeout
	}
	return err
}

// TestRetryKVLostAnswers: a compare-and-set write whose answer was lost is
// not reported as a conflict when its retry finds it applied; a real
// conflict still is.
func TestRetryKVLostAnswers(t *testing.T) {
	srv, err := embednats.Start(embednats.Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	js, _ := jetstream.New(testkit.Connect(t, srv))
	bucket, err := js.CreateKeyValue(withTimeout(t), jetstream.KeyValueConfig{Bucket: "lossy", History: 5})
	if err != nil {
		t.Fatal(err)
	}
	lossy := &lossyKV{KeyValue: bucket, lose: map[string]bool{"create": true, "update": true, "delete": true}}
	kv := bus.RetryKV(lossy)

	rev, err := kv.Create(withTimeout(t), "k", []byte("v1"))
	if err != nil {
		t.Fatalf("Create with a lost answer = %v, want success", err)
	}
	if e, _ := bucket.Get(withTimeout(t), "k"); e == nil || e.Revision() != rev || string(e.Value()) != "v1" {
		t.Fatalf("Create returned revision %d; stored %v", rev, e)
	}
	rev2, err := kv.Update(withTimeout(t), "k", []byte("v2"), rev)
	if err != nil {
		t.Fatalf("Update with a lost answer = %v, want success", err)
	}
	if e, _ := bucket.Get(withTimeout(t), "k"); e == nil || e.Revision() != rev2 || string(e.Value()) != "v2" {
		t.Fatalf("Update returned revision %d; stored %v", rev2, e)
	}
	if err := kv.Delete(withTimeout(t), "k", jetstream.LastRevision(rev2)); err != nil {
		t.Fatalf("Delete with a lost answer = %v, want success", err)
	}
	if _, err := bucket.Get(withTimeout(t), "k"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("after Delete: Get = %v, want not found", err)
	}

	// Conflicts met on a first try stand.
	if _, err := bucket.Put(withTimeout(t), "taken", []byte("theirs")); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(withTimeout(t), "taken", []byte("theirs")); !errors.Is(err, jetstream.ErrKeyExists) {
		t.Fatalf("Create of an existing key = %v, want ErrKeyExists", err)
	}
	if _, err := kv.Update(withTimeout(t), "taken", []byte("mine"), 1); !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		t.Fatalf("Update at a stale revision = %v, want ErrKeyRevisionMismatch", err)
	}
	// A retry that finds another value keeps the conflict.
	e, _ := bucket.Get(withTimeout(t), "taken")
	other := &racingKV{KeyValue: bucket, then: func() { _, _ = bucket.Put(context.Background(), "taken", []byte("later")) }}
	if _, err := bus.RetryKV(other).Update(withTimeout(t), "taken", []byte("mine"), e.Revision()); !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		t.Fatalf("Update whose retry finds another writer's value = %v, want ErrKeyRevisionMismatch", err)
	}

	// Reads of every key and of a history go through the same retries.
	keys, err := kv.Keys(withTimeout(t))
	if err != nil || len(keys) != 1 || keys[0] != "taken" {
		t.Fatalf("Keys = %v, %v", keys, err)
	}
	h, err := kv.History(withTimeout(t), "k")
	if err != nil || len(h) != 3 {
		var ops []string
		for _, e := range h {
			ops = append(ops, fmt.Sprintf("%d %v %q", e.Revision(), e.Operation(), e.Value()))
		}
		t.Fatalf("History of k = %v, %v; want create, update, delete", ops, err)
	}
}

// racingKV loses its first Update's answer after another writer changed the
// key behind it (then).
type racingKV struct {
	jetstream.KeyValue
	then func()
	done bool
}

func (r *racingKV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	if !r.done {
		r.done = true
		r.then()
		return 0, jetstream.ErrNoStreamResponse
	}
	return r.KeyValue.Update(ctx, key, value, last)
}
