package credential

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/mcpbus/mcpbus/libs/ops"
	"github.com/mcpbus/mcpbus/services/credential/store"
)

// backendHealth probes a store that can be down while the service runs (Vault)
// in the background, so /readyz says "not ready" while no request could be
// served, without doing I/O itself (ops checks must answer at once).
type backendHealth struct {
	p        store.Pinger
	interval time.Duration
	timeout  time.Duration
	// last is the error of the last probe (a *probeResult; nil before the first).
	last atomic.Pointer[probeResult]
}

type probeResult struct{ err error }

// run probes now and every interval until ctx ends.
func (h *backendHealth) run(ctx context.Context) {
	t := time.NewTicker(h.interval)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, h.timeout)
		err := h.p.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		h.last.Store(&probeResult{err: err})
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// err is the readiness of the backend: the last probe's outcome.
func (h *backendHealth) err() error {
	r := h.last.Load()
	if r == nil {
		return errors.New("not probed yet")
	}
	return r.err
}

// Checks are the service's own readiness conditions (libs/service adds them to
// /readyz): the backend answers, when it is one that can be down.
func (s *Service) Checks() []ops.Check {
	if s.health == nil {
		return nil
	}
	return []ops.Check{{Name: "backend", Err: s.health.err}}
}
