package bus

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// setupAttempt bounds one try of a setup step: while a fresh cluster
// settles, a JetStream API request may go unanswered, and a new try is
// answered at once. setupBackoffMax caps the pause between tries.
const (
	setupAttempt    = 3 * time.Second
	setupBackoffMin = 100 * time.Millisecond
	setupBackoffMax = 5 * time.Second
)

// Setup runs step until it succeeds or ctx ends. A service starting next to
// a fresh cluster finds JetStream without leaders for a while, and several
// services create the same assets at once: start-up waits and says what it
// waits for instead of exiting. log may be nil.
func Setup(ctx context.Context, log *slog.Logger, what string, step func(ctx context.Context) error) error {
	wait := setupBackoffMin
	for try := 1; ; try++ {
		actx, cancel := context.WithTimeout(ctx, setupAttempt)
		err := step(actx)
		cancel()
		if err == nil {
			if try > 1 && log != nil {
				log.Info("setup step done", "step", what, "tries", try)
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
