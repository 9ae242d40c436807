package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Creating a stream or bucket: nats-server drops the answers to concurrent
// identical creates of one stream (every service creates the shared assets
// at start; nats-io/nats.go#949), though the stream is made. So a create
// that has not answered within createPatience also looks the stream up every
// createPoll, and the stream counts as made once it has a leader, answer or
// not. A lookup still finding no stream createLost after the create was
// sent means the request itself was lost: the try ends, and Setup sends it
// again.
const (
	createPatience = 100 * time.Millisecond
	createPoll     = 50 * time.Millisecond
	createLookup   = 250 * time.Millisecond
	createLost     = 2 * time.Second
)

// CreateAsset runs create, falling back to lookup as described above; lookup
// also stands in when create fails (an asset another service made with other
// settings is used as it is). stream is the JetStream stream behind the
// asset ("KV_<bucket>", "OBJ_<bucket>"), whose leader the polls wait for.
// Run it as a Setup step: a lost create ends the try.
func CreateAsset[T any](ctx context.Context, js jetstream.JetStream, stream string,
	create func(context.Context) (T, error), lookup func(context.Context) (T, error)) (T, error) {
	var zero T
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		v   T
		err error
	}
	created := make(chan result, 1)
	go func() {
		v, err := create(ctx)
		created <- result{v, err}
	}()
	// An info request about a stream being made may go unanswered too: the
	// polls run beside the create, so its answer is taken as soon as it comes.
	found := make(chan error, 1)
	go func() { found <- waitLeader(ctx, js, stream) }()
	for {
		select {
		case r := <-created:
			if r.err == nil {
				return r.v, nil
			}
			if v, err := lookupBounded(ctx, lookup); err == nil {
				return v, nil
			}
			return zero, r.err
		case err := <-found:
			if err != nil {
				return zero, err
			}
			if v, err := lookupBounded(ctx, lookup); err == nil {
				return v, nil
			}
			found = nil // lost meanwhile: wait for the create's answer
		case <-ctx.Done():
			return zero, ctx.Err()
		}
	}
}

// lookupBounded runs lookup with createLookup per try, again every
// createPoll for up to createLost: its info request may go unanswered like
// the create's, and an unbounded one would wait out the whole Setup try.
func lookupBounded[T any](ctx context.Context, lookup func(context.Context) (T, error)) (T, error) {
	deadline := time.Now().Add(createLost)
	for {
		lctx, cancel := context.WithTimeout(ctx, createLookup)
		v, err := lookup(lctx)
		cancel()
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(createPoll):
		}
	}
}

// waitLeader polls until stream exists with a leader (a member of a
// leaderless group may answer an info request too), returning nil; or an
// error once the stream is still unknown createLost after the start, or when
// ctx ends.
func waitLeader(ctx context.Context, js jetstream.JetStream, stream string) error {
	start := time.Now()
	wait := createPatience
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = createPoll
		lctx, cancel := context.WithTimeout(ctx, createLookup)
		st, err := js.Stream(lctx, stream)
		cancel()
		if err == nil {
			if ci := st.CachedInfo().Cluster; ci == nil || ci.Leader != "" {
				return nil
			}
		}
		if errors.Is(err, jetstream.ErrStreamNotFound) && time.Since(start) > createLost {
			return fmt.Errorf("creating %s: no answer, and the stream does not exist", stream)
		}
	}
}
