package testkit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// StallStress is a hunt for a lost stdio call (docs/benchmarks.md, "A go-sdk
// stdio stall seen while benchmarking"), set from the environment:
// MCPBUS_STALL_STRESS how long (unset: the test is skipped, as a run takes
// minutes of both cores), MCPBUS_STALL_WORKERS calls at a time (16),
// MCPBUS_STALL_SHORT_US=n a random deadline of up to n µs on every other
// call (so cancellations race responses), MCPBUS_STALL_AFTER how long a call
// may be out before it counts as stalled (3s), MCPBUS_STALL_DIR where the
// post-mortem goes (default a temp dir).
type StallStress struct {
	Duration time.Duration
	Workers  int
	ShortUS  int
	After    time.Duration
	Dir      string
}

// StallStressFromEnv reads the hunt's settings, skipping t when
// MCPBUS_STALL_STRESS is unset.
func StallStressFromEnv(t *testing.T) StallStress {
	d, err := time.ParseDuration(os.Getenv("MCPBUS_STALL_STRESS"))
	if err != nil {
		t.Skip("set MCPBUS_STALL_STRESS to a duration (e.g. 4m) to run the stdio stall stress")
	}
	s := StallStress{Duration: d, Workers: 16, After: 3 * time.Second, Dir: os.Getenv("MCPBUS_STALL_DIR")}
	if n, err := strconv.Atoi(os.Getenv("MCPBUS_STALL_WORKERS")); err == nil && n > 0 {
		s.Workers = n
	}
	if n, err := strconv.Atoi(os.Getenv("MCPBUS_STALL_SHORT_US")); err == nil && n > 0 {
		s.ShortUS = n
	}
	if a, err := time.ParseDuration(os.Getenv("MCPBUS_STALL_AFTER")); err == nil && a > 0 {
		s.After = a
	}
	if s.Dir == "" {
		s.Dir = t.TempDir()
	}
	return s
}

// Run calls call with a new probe message each time, a goroutine per call,
// Workers at a time, until Duration is over or a call stalls: a call out
// for After runs stalled(msg) once (the post-mortem), and the test fails
// once every call has ended. call reports a wrong answer as an error; an
// error once its context is done counts as ended by its deadline.
func (s StallStress) Run(t *testing.T, call func(ctx context.Context, msg string) error, stalled func(msg string)) {
	t.Helper()
	var calls, timedOut atomic.Int64
	var stall atomic.Bool
	sem := make(chan struct{}, s.Workers)
	var wg sync.WaitGroup
	for i, end := 0, time.Now().Add(s.Duration); time.Now().Before(end) && !stall.Load(); i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			deadline := 10 * time.Second
			if s.ShortUS > 0 && i%2 == 1 {
				deadline = time.Duration(1+rand.IntN(s.ShortUS)) * time.Microsecond
			}
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			msg := fmt.Sprintf("stall-probe-%d", i)
			watch := time.AfterFunc(s.After, func() {
				if stall.CompareAndSwap(false, true) {
					stalled(msg)
				}
			})
			err := call(ctx, msg)
			watch.Stop()
			calls.Add(1)
			switch {
			case err != nil && ctx.Err() != nil:
				timedOut.Add(1)
			case err != nil:
				t.Errorf("call %s: %v", msg, err)
			}
		}()
	}
	wg.Wait()
	t.Logf("%d calls (%d ended by their deadline), stalled: %v", calls.Load(), timedOut.Load(), stall.Load())
	if stall.Load() {
		t.Fatalf("a call stalled; post-mortem in %s", s.Dir)
	}
}
