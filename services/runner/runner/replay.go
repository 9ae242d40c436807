package runner

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
)

// replayDrainWait is how long after a reconnect the drains of stopped
// servers' subscriptions are surely over (their flush ends at the disconnect).
const replayDrainWait = time.Second

// forgetReplayedSubs reconnects once more after a reconnect that followed
// stopping servers while NATS was away.
//
// Why: stopping a server drains its subscriptions, and nats.go (v1.55) drops
// a draining subscription only when its flush returns. A reconnect that lands
// first resends it to the server with no UNSUB after it, so the server keeps
// routing that server's calls here, to a subscription nobody reads, and a
// queue group prefers members on the caller's own node: callers there time
// out until the connection ends. A second reconnect, once the drains are
// over, leaves the server only the subscriptions still alive.
func (r *Runner) forgetReplayedSubs(ctx context.Context) {
	ch := r.nc.StatusChanged(nats.CONNECTED)
	defer r.nc.RemoveStatusListener(ch)
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
		if !r.awayStops.Load() {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(replayDrainWait):
		}
		if !r.awayStops.Swap(false) || !r.nc.IsConnected() {
			continue
		}
		r.log.Info("reconnecting once more so NATS forgets the subscriptions of servers stopped while it was away")
		if err := r.nc.ForceReconnect(); err != nil {
			r.log.Warn("reconnecting to NATS failed", "error", err)
		}
	}
}
