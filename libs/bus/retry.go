package bus

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A JetStream request that reaches a stream with no leader (a node died and
// its R3 groups are electing new ones, 4–9 s with nats-server's election
// timeouts) gets no answer at all. Retry bounds each try by retryAttempt and
// tries again, backing off, until the caller's deadline.
const (
	retryAttempt    = 2 * time.Second
	retryBackoffMin = 50 * time.Millisecond
	retryBackoffMax = time.Second
	// retryDefault bounds the retries of a caller whose context has no deadline.
	retryDefault = 30 * time.Second
)

// Transient reports whether a failed JetStream request may succeed when sent
// again: it went unanswered (no leader, a reconnect), or the server said its
// cluster is not available for now. Conflicts, missing keys and bad requests
// are final.
func Transient(err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, nats.ErrConnectionReconnecting):
		return true
	}
	var api *jetstream.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode {
		case errCodeClusterNotAvailable, errCodeLastSeqNotReady:
			return true
		}
	}
	return false
}

// nats-server error codes of a cluster that is electing leaders.
const (
	errCodeClusterNotAvailable jetstream.ErrorCode = 10008 // JetStream system temporarily unavailable
	errCodeLastSeqNotReady     jetstream.ErrorCode = 10163 // expected last sequence per subject temporarily unavailable
)

// Retry runs op, each try bounded by retryAttempt, until it succeeds, fails
// for good (not Transient), or ctx ends (retryDefault when ctx has no
// deadline). tries counts the calls of op, so an op can tell a first try
// from one that follows a try whose outcome is unknown (an unanswered write
// may have been applied).
func Retry(ctx context.Context, op func(ctx context.Context, try int) error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, retryDefault)
		defer cancel()
	}
	wait := retryBackoffMin
	for try := 1; ; try++ {
		actx, cancel := context.WithTimeout(ctx, retryAttempt)
		err := op(actx, try)
		cancel()
		if err == nil || !Transient(err) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(wait*2, retryBackoffMax)
	}
}

// RetryValue is Retry for an op with a result.
func RetryValue[T any](ctx context.Context, op func(ctx context.Context, try int) (T, error)) (T, error) {
	var out T
	err := Retry(ctx, func(ctx context.Context, try int) error {
		v, err := op(ctx, try)
		if err == nil {
			out = v
		}
		return err
	})
	return out, err
}
