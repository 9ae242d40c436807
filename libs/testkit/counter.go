package testkit

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// Counter counts the messages published on a subject.
type Counter struct {
	n   atomic.Int64
	nc  *nats.Conn
	sub *nats.Subscription
}

// Count subscribes nc to subject and counts what arrives from now on.
func Count(tb testing.TB, nc *nats.Conn, subject string) *Counter {
	tb.Helper()
	c := &Counter{nc: nc}
	var err error
	if c.sub, err = nc.Subscribe(subject, func(*nats.Msg) { c.n.Add(1) }); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		tb.Fatal(err)
	}
	return c
}

// Settled returns the count once messages in flight have been counted: after
// a flush the server has sent every message published before it, and each has
// been counted once none waits for the handler and the handler has counted
// every one handed to it. Reading the count right after the flush raced the
// handler's goroutine on a loaded host.
func (c *Counter) Settled(tb testing.TB) int64 {
	tb.Helper()
	if err := c.nc.Flush(); err != nil {
		tb.Fatal(err)
	}
	WaitFor(tb, 30*time.Second, func() (bool, string) {
		queued, _, err := c.sub.Pending()
		delivered, derr := c.sub.Delivered()
		return err == nil && derr == nil && queued == 0 && c.n.Load() == delivered,
			fmt.Sprintf("%d messages queued, %d delivered, %d counted (%v, %v)", queued, delivered, c.n.Load(), err, derr)
	})
	return c.n.Load()
}

// Seen is the count so far, without waiting: for polling until a message comes.
func (c *Counter) Seen() int64 { return c.n.Load() }
