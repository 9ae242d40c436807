package bus

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// DropConsumer deletes a consumer of stream (ordered, or a ReadConsumer) once its reader is
// done: stopping it leaves the server-side consumer to its inactivity
// timeout (minutes), and readers come and go. It runs even when ctx has
// ended (the reader's end is often why), for at most wait; a consumer gone
// already is no error worth reporting.
func DropConsumer(ctx context.Context, js jetstream.JetStream, stream string, cons jetstream.Consumer, wait time.Duration) {
	info := cons.CachedInfo()
	if info == nil {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait)
	defer cancel()
	_ = js.DeleteConsumer(dctx, stream, info.Name)
}

// StartAfterLast makes an ordered consumer config that delivers new
// messages start after the stream's last one instead, and returns that
// sequence. nats.go recreates an ordered consumer whose node was lost (its
// heartbeats stop) from the message after the last it delivered; one that
// delivered none yet is recreated with its own policy, and "new" then skips
// every message published while it was gone.
func StartAfterLast(ctx context.Context, js jetstream.JetStream, stream string, cfg *jetstream.OrderedConsumerConfig) (uint64, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, err
	}
	last := st.CachedInfo().State.LastSeq
	cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, last+1
	return last, nil
}

// ReadConsumer creates an ephemeral consumer of stream for one read (no
// acks, in memory, one replica, gone a minute after its reader falls
// silent), retried through a leader election within ctx; the reader
// fetches from it, checks its deliveries with InOrder and drops it
// (DropConsumer). An ordered consumer does not do for such a read: nats.go
// recreates it on every Fetch, retrying without end and without a
// context, so a read during an election outlived its caller's deadline.
func ReadConsumer(ctx context.Context, js jetstream.JetStream, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	cfg.AckPolicy, cfg.MemoryStorage, cfg.Replicas = jetstream.AckNonePolicy, true, 1
	if cfg.InactiveThreshold == 0 {
		cfg.InactiveThreshold = time.Minute
	}
	return RetryValue(ctx, func(ctx context.Context, _ int) (jetstream.Consumer, error) {
		return js.CreateConsumer(ctx, stream, cfg)
	})
}

// InOrder checks that a ReadConsumer's deliveries come without a gap: one
// lost on its way (a fetch's reply lost with a route) would otherwise go
// unseen, the consumer having moved past it.
type InOrder struct{ last uint64 }

// Check takes the metadata of the next delivery.
func (o *InOrder) Check(md *jetstream.MsgMetadata) error {
	if md.Sequence.Consumer != o.last+1 {
		return apierr.Newf(apierr.Network, "a delivery of stream %s was lost on its way (delivery %d after %d): read again", md.Stream, md.Sequence.Consumer, o.last)
	}
	o.last = md.Sequence.Consumer
	return nil
}
