package bus

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Batcher publishes messages that may wait a little (audit events) in bursts
// rather than one at a time. A message published alone lands on the server
// next to the reply it follows and costs the JetStream stream that captures
// it a wake-up at that very moment; a burst every Delay costs one, after the
// replies. Order is kept; nothing is dropped.
type Batcher struct {
	nc    *nats.Conn
	delay time.Duration
	max   int

	mu      sync.Mutex
	pending []*nats.Msg
	timer   *time.Timer
}

// NewBatcher publishes on nc at most delay after a message is added, or at
// once when max messages wait.
func NewBatcher(nc *nats.Conn, delay time.Duration, max int) *Batcher {
	return &Batcher{nc: nc, delay: delay, max: max}
}

// Publish queues m.
func (b *Batcher) Publish(m *nats.Msg) {
	b.mu.Lock()
	b.pending = append(b.pending, m)
	full := len(b.pending) >= b.max
	if len(b.pending) == 1 && !full {
		b.timer = time.AfterFunc(b.delay, b.Flush)
	}
	b.mu.Unlock()
	if full {
		b.Flush()
	}
}

// Flush publishes every queued message now (also at shutdown).
func (b *Batcher) Flush() {
	b.mu.Lock()
	msgs := b.pending
	b.pending = nil
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	// Publishing under the lock keeps the order across concurrent flushes;
	// PublishMsg only appends to the connection's buffer.
	for _, m := range msgs {
		_ = b.nc.PublishMsg(m)
	}
	b.mu.Unlock()
}
