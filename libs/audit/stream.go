package audit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/bus"
)

// From is where reading starts: a stream sequence, a time, or (both
// zero) the stream's first record.
type From struct {
	Seq  uint64
	Time time.Time
}

// ReadStream passes every record of the audit stream from `from` up to its
// last one when reading began to fn, in stream order; it says whether the
// reading began at the first record the stream ever held (FromStart).
// Each wait is bounded by idle.
func ReadStream(ctx context.Context, js jetstream.JetStream, from From, idle time.Duration, fn func(Entry)) (fromStart bool, err error) {
	st, err := js.Stream(ctx, bus.StreamAudit)
	if err != nil {
		return false, fmt.Errorf("audit stream: %w", err)
	}
	info := st.CachedInfo()
	fromStart = from.Seq <= 1 && from.Time.IsZero() && info.State.FirstSeq <= 1
	last := info.State.LastSeq
	if info.State.Msgs == 0 || (from.Seq > last) {
		return fromStart, nil
	}
	cfg := jetstream.OrderedConsumerConfig{}
	switch {
	case from.Seq > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from.Seq
	case !from.Time.IsZero():
		t := from.Time
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &t
	}
	cons, err := st.OrderedConsumer(ctx, cfg)
	if err != nil {
		return false, fmt.Errorf("audit stream: %w", err)
	}
	for {
		batch, err := cons.FetchNoWait(1000)
		if err != nil {
			return false, fmt.Errorf("audit stream: %w", err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				return false, fmt.Errorf("audit stream: %w", err)
			}
			fn(Entry{StreamSeq: md.Sequence.Stream, Subject: m.Subject(), Data: m.Data()})
			if md.Sequence.Stream >= last {
				return fromStart, nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return false, fmt.Errorf("audit stream: %w", err)
		}
		if n == 0 { // nothing pending yet: wait a little, bounded
			select {
			case <-ctx.Done():
				return false, ctx.Err()
			case <-time.After(idle / 20):
			}
			if idle -= idle / 20; idle <= 0 {
				return false, errors.New("audit stream: no record came within the wait")
			}
		}
	}
}
