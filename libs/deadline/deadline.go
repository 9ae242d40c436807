// Package deadline bounds a tool call by a time limit that stops counting
// while the call waits on a person. A server's request for input
// (elicitation) is answered by someone reading a form: that takes as long as
// it takes, bounded by the input's own timeout, and must not use up the
// time the call's limit gives the server to work.
//
// WithTimeout makes such a limit; Pause, called by whoever waits on the
// person, stops every limit of its context until the wait ends. The context
// reports no deadline of its own (a fixed time would be wrong once paused):
// Left says how much of the limit remains, for a request that tells the
// next hop how long its caller waits.
package deadline

import (
	"context"
	"sync"
	"time"
)

// WithTimeout returns a context cancelled d after it was made, not counting
// the time spent paused. Its Err is then context.DeadlineExceeded. Cancel
// releases it early, as context.WithTimeout's does.
func WithTimeout(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	c := &limitCtx{parent: parent, done: make(chan struct{}), left: d, since: time.Now()}
	c.chain.l = c
	c.chain.next, _ = parent.Value(chainKey{}).(*chain)
	if err := parent.Err(); err != nil {
		c.end(err)
		return c, func() {}
	}
	c.mu.Lock() // the timer or the parent may end c before both are set
	c.timer = time.AfterFunc(d, c.expire)
	if parent.Done() != nil {
		c.stopParent = context.AfterFunc(parent, func() { c.end(parent.Err()) })
	}
	c.mu.Unlock()
	return c, func() { c.end(context.Canceled) }
}

// Pause stops every limit of ctx (made by WithTimeout, in ctx or its
// parents) from counting until resume is called. Pauses nest: a limit
// counts again once each of its pauses has resumed. A ctx without limits
// pauses nothing. resume may be called more than once.
func Pause(ctx context.Context) (resume func()) {
	ch, _ := ctx.Value(chainKey{}).(*chain)
	var paused []*limitCtx
	for ; ch != nil; ch = ch.next {
		if ch.l.pause() {
			paused = append(paused, ch.l)
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			for _, l := range paused {
				l.resume()
			}
		})
	}
}

// Left is how much of ctx's tightest running limit remains: its own
// deadline's, or one made by WithTimeout's. A paused limit bounds nothing
// while paused, so it is left out: a request made meanwhile (the wait for a
// person's answer itself) needs its own bound. ok is false when ctx has no
// deadline and no running limit.
func Left(ctx context.Context) (left time.Duration, ok bool) {
	if dl, has := ctx.Deadline(); has {
		left, ok = time.Until(dl), true
	}
	ch, _ := ctx.Value(chainKey{}).(*chain)
	for ; ch != nil; ch = ch.next {
		if l, running := ch.l.remaining(); running && (!ok || l < left) {
			left, ok = l, true
		}
	}
	return left, ok
}

type chainKey struct{}

// chain lists the limits of a context, innermost first.
type chain struct {
	l    *limitCtx
	next *chain
}

// limitCtx is a context with a pausable limit. It is its own type, not a
// wrapped cancelCtx, so that its children see context.DeadlineExceeded
// when the limit runs out (the standard library gives a child its
// parent's Err).
type limitCtx struct {
	parent     context.Context
	done       chan struct{}
	chain      chain
	timer      *time.Timer
	stopParent func() bool

	mu     sync.Mutex
	err    error
	left   time.Duration // while counting: what remained at since
	since  time.Time     // when it last started counting
	paused int
	after  []*func() // AfterFunc's, run when c ends
}

func (c *limitCtx) Deadline() (time.Time, bool) { return c.parent.Deadline() }
func (c *limitCtx) Done() <-chan struct{}       { return c.done }

func (c *limitCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *limitCtx) Value(key any) any {
	if _, ok := key.(chainKey); ok {
		return &c.chain
	}
	return c.parent.Value(key)
}

func (c *limitCtx) end(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.err = err
	close(c.done)
	if c.timer != nil {
		c.timer.Stop()
	}
	if c.stopParent != nil {
		c.stopParent()
	}
	for _, f := range c.after {
		go (*f)()
	}
	c.after = nil
}

// AfterFunc runs f once c ends, as context.AfterFunc does. The standard
// library uses it to end c's children without a goroutine each.
func (c *limitCtx) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		go f()
		return func() bool { return false }
	}
	key := &f
	c.after = append(c.after, key)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, k := range c.after {
			if k == key {
				c.after = append(c.after[:i], c.after[i+1:]...)
				return true
			}
		}
		return false
	}
}

// expire ends the context unless a pause or a resume moved its limit
// after the timer was set: the timer's callback may run late.
func (c *limitCtx) expire() {
	c.mu.Lock()
	late := c.paused == 0 && c.err == nil && time.Since(c.since) >= c.left
	c.mu.Unlock()
	if late {
		c.end(context.DeadlineExceeded)
	}
}

func (c *limitCtx) pause() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return false
	}
	if c.paused == 0 {
		c.left -= time.Since(c.since)
		c.timer.Stop()
	}
	c.paused++
	return true
}

func (c *limitCtx) resume() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.paused--; c.paused > 0 || c.err != nil {
		return
	}
	c.since = time.Now()
	c.timer.Reset(max(c.left, 0))
}

// remaining is what is left of c's limit, and whether it is counting.
func (c *limitCtx) remaining() (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, true
	}
	if c.paused > 0 {
		return c.left, false
	}
	return c.left - time.Since(c.since), true
}

// String names the context as the standard library's do, for logs.
func (c *limitCtx) String() string { return "deadline.WithTimeout" }
