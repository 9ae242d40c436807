package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// setupAttempt bounds one try of a setup step. It fits the creation of an
// R3 asset even when its group's first leader election fails (nats-server
// waits 4–9 s before a second one); a create whose answer is lost is noticed
// sooner (createAsset). setupBackoffMax caps the pause between tries.
const (
	setupAttempt    = 10 * time.Second
	setupBackoffMin = 100 * time.Millisecond
	setupBackoffMax = 5 * time.Second
	// storageGiveUp is how long one server's refusal of storage (10047)
	// is retried before start-up fails: long enough to ride out another
	// creator's fit, which holds more than it keeps for a moment
	// (FitMaxBytes), short of leaving a newcomer waiting on a full disk.
	storageGiveUp = 5 * time.Second
)

// Setup runs step until it succeeds or ctx ends. A service starting next to
// a fresh cluster finds JetStream without leaders for a while, and several
// services create the same assets at once: start-up waits and says what it
// waits for instead of exiting. log may be nil. The exception is a server
// that keeps refusing storage (its disk too full for the bounds asked):
// that does not pass by waiting, so after storageGiveUp the step fails
// with an error that says what to do.
func Setup(ctx context.Context, log *slog.Logger, what string, step func(ctx context.Context) error) error {
	wait := setupBackoffMin
	began := time.Now()
	var outOfStorage time.Time // when the refusals of storage began
	for try := 1; ; try++ {
		actx, cancel := context.WithTimeout(ctx, setupAttempt)
		err := step(actx)
		cancel()
		err = storageAdvice(what, err)
		if serverOutOfStorage(err) {
			if outOfStorage.IsZero() {
				outOfStorage = time.Now()
			} else if time.Since(outOfStorage) >= storageGiveUp {
				return err
			}
		} else {
			outOfStorage = time.Time{}
		}
		if err == nil {
			if log != nil {
				level := slog.LevelDebug
				if try > 1 {
					level = slog.LevelInfo
				}
				log.Log(ctx, level, "setup step done", "step", what, "tries", try, "took", time.Since(began).Round(time.Millisecond).String())
			}
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w (last error: %v)", what, ctx.Err(), err)
		}
		if log != nil {
			log.Warn("waiting for NATS JetStream", "step", what, "try", try, "retry_in", wait, "error", err.Error())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last error: %v)", what, ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(wait*2, setupBackoffMax)
	}
}

// storageAdvice makes JetStream's refusal of storage (a bucket's, which
// reserves no bound but needs room left; FitMaxBytes gives a stream's) say
// what to do.
func storageAdvice(what string, err error) error {
	var se *StorageError
	if !InsufficientStorage(err) || errors.As(err, &se) {
		return err
	}
	return fmt.Errorf("%s: the NATS server has no storage left to reserve: %s: %w", what, StorageAdvice, err)
}
