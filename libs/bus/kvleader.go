package bus

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// kvLeaderTimeout bounds one read of a bucket's stream leader.
const kvLeaderTimeout = time.Second

// watchLeader reads the leader of the watched bucket's stream now and every
// LeaderInterval until ctx ends, and sends the new one on changed (once)
// when it differs from the first read. A KV watch is an ordered consumer that
// may live on the stream leader's node: when that node dies and the
// follower's connection (to another node) stays up, the watch goes silent
// until nats.go misses two 5 s heartbeats, and its consumer's re-creation,
// tried again only at the next miss, may take 10 s more. A new leader is the
// sign to start over at once. Reads that fail (no leader yet, a slow reply)
// are skipped. A bucket of one replica is not checked after the first read
// (no other node can lead it: a restart of its own is a reconnect), nor one
// whose status carries no stream info (a test double).
func (f *kvFollower) watchLeader(ctx context.Context, changed chan<- string) {
	t := time.NewTicker(f.opts.LeaderInterval)
	defer t.Stop()
	first, known := "", false
	for {
		leader, ok, checkable := f.leader(ctx)
		switch {
		case !checkable:
			return
		case ok && !known:
			first, known = leader, true
		case ok && leader != first:
			changed <- leader
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// leader reads the bucket's stream leader; ok is false when it could not be
// read, checkable false when it cannot change or the bucket cannot tell.
func (f *kvFollower) leader(ctx context.Context) (leader string, ok, checkable bool) {
	ctx, cancel := context.WithTimeout(ctx, kvLeaderTimeout)
	defer cancel()
	st, err := f.kv.Status(ctx)
	if err != nil {
		return "", false, true
	}
	bs, isBucket := st.(*jetstream.KeyValueBucketStatus)
	if !isBucket || bs.StreamInfo() == nil || bs.StreamInfo().Config.Replicas <= 1 {
		return "", false, false
	}
	if c := bs.StreamInfo().Cluster; c != nil && c.Leader != "" {
		return c.Leader, true, true
	}
	return "", false, true
}
