package bus

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// kvLeaderTimeout bounds one read of a bucket's stream leader.
const kvLeaderTimeout = time.Second

// leadership is who leads a stream and since when: a node that loses the
// leadership and wins it back has a new one.
type leadership struct {
	leader string
	since  time.Time
}

func (l leadership) same(o leadership) bool { return l.leader == o.leader && l.since.Equal(o.since) }

// watchLeader reads the leadership of the watched bucket's stream now and
// every LeaderInterval until ctx ends, and sends the new leader on changed
// (once) when the leadership differs from the first read. A KV watch is an
// ordered consumer that may live on the stream leader's node: when that node
// dies and the follower's connection (to another node) stays up, the watch
// goes silent until nats.go misses two 5 s heartbeats, and its consumer's
// re-creation, tried again only at the next miss, may take 10 s more. A new
// leadership is the sign to start over at once. It is told by the leader and
// its election time together: a leadership that moved away and back between
// two reads (n2 → n3, n3 SIGKILLed, n2 again) left the leader's name as it
// was, and a watch whose consumer died with n3 silent for good (a runner then
// never saw the dead runner's leases lapse). Reads that fail (no leader yet, a
// slow reply) are skipped; when the first reads failed, a leadership elected
// after the watch began is new to it. A bucket of one replica is not checked
// after the first read (no other node can lead it: a restart of its own is a
// reconnect), nor one whose status carries no stream info (a test double).
func (f *kvFollower) watchLeader(ctx context.Context, began time.Time, changed chan<- string) {
	t := time.NewTicker(f.opts.LeaderInterval)
	defer t.Stop()
	var first leadership
	known, missed := false, false
	for {
		l, ok, checkable := f.leader(ctx)
		switch {
		case !checkable:
			return
		case !ok:
			missed = true
		case !known && missed && l.since.After(began):
			changed <- l.leader
			return
		case !known:
			first, known = l, true
		case !l.same(first):
			changed <- l.leader
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// leader reads the bucket's stream leadership; ok is false when it could not
// be read, checkable false when it cannot change or the bucket cannot tell.
func (f *kvFollower) leader(ctx context.Context) (l leadership, ok, checkable bool) {
	ctx, cancel := context.WithTimeout(ctx, kvLeaderTimeout)
	defer cancel()
	st, err := f.kv.Status(ctx)
	if err != nil {
		return l, false, true
	}
	bs, isBucket := st.(*jetstream.KeyValueBucketStatus)
	if !isBucket || bs.StreamInfo() == nil || bs.StreamInfo().Config.Replicas <= 1 {
		return l, false, false
	}
	if c := bs.StreamInfo().Cluster; c != nil && c.Leader != "" {
		l.leader = c.Leader
		if c.LeaderSince != nil {
			l.since = *c.LeaderSince
		}
		return l, true, true
	}
	return l, false, true
}
