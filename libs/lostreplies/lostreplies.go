// Package lostreplies ends the calls whose reply was lost while the
// caller's NATS connection was down.
//
// A reply published while its requester is disconnected reaches nobody
// (core NATS keeps no message for a subscriber that is gone), and the call
// would wait out its timeout (the gateway's is 60 s) to report that the
// tool did not answer, when it did, side effects included. The runner
// records every call's end in the events stream (MCP_EVENTS, the call
// event, with the request id in its header), which outlives the gap. Once
// the connection is back, a Watch reads the call events since the break
// (the oldest call in flight across the drop, or how long a broken
// connection may go unnoticed) and ends each such call whose event it
// finds and that is still waiting a moment later (grace: a reply published
// just after the reconnection is on its way). Calls without an event keep
// waiting for their reply, which reaches the new connection; some time
// after the reconnection (settle) the reading stops.
package lostreplies

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
)

// ErrLost is wrapped by the error of a call whose reply was lost: the call
// ran (its event says how it ended), so retrying it runs it again.
var ErrLost = errors.New("the reply of the call was lost while the connection to NATS was down")

// Watch knows the calls in flight over one connection.
type Watch struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	subject string // every server's call events
	log     *slog.Logger
	status  chan nats.Status
	// detect bounds how long a broken connection goes unnoticed (nats.go's
	// pings): replies are lost from the break on, not only once it is seen.
	detect time.Duration
	wg     sync.WaitGroup // the readings

	mu    sync.Mutex
	calls map[string]*call // request id → call in flight
	risky int              // calls at risk
	// droppedAt and upAt are when the connection last dropped and came
	// back; seen is its reconnections then (a missed status is caught up).
	droppedAt, upAt time.Time
	seen            uint64
	reading         bool
}

type call struct {
	server, tool, principal string
	start                   time.Time
	// atRisk: the connection dropped during the call, so its reply may
	// have been lost.
	atRisk bool
	cancel context.CancelCauseFunc
}

const (
	// clockSkew widens the events read: the stream stamps them with its
	// server's clock, not the caller's.
	clockSkew = 5 * time.Second
	// settle is how long after the connection is back a lost reply's
	// event may still come (the runner publishes it after the reply, in
	// batches); calls still at risk then got or will get their reply.
	settle = 10 * time.Second
	// grace is how long a call whose event was found may still get its
	// reply (published just after the reconnection, on its way): only a
	// call still waiting then has lost it.
	grace = 500 * time.Millisecond
	// recheck is how often the reading and Run look again when nothing
	// comes.
	recheck = time.Second
)

// New returns a Watch of nc's calls; Run makes it act on drops.
func New(nc *nats.Conn, prefix string, log *slog.Logger) (*Watch, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("lost replies: %w", err)
	}
	detect := nc.Opts.PingInterval * time.Duration(max(nc.Opts.MaxPingsOut, 1))
	if detect <= 0 {
		detect = nats.DefaultPingInterval * nats.DefaultMaxPingOut
	}
	return &Watch{nc: nc, js: js, subject: bus.NewSubjects(prefix).EventsOf("call"), log: log, detect: detect,
		// Listening from here: a drop before Run runs is not missed.
		status: nc.StatusChanged(nats.DISCONNECTED, nats.RECONNECTING, nats.CONNECTED),
		calls:  map[string]*call{}, seen: nc.Stats().Reconnects}, nil
}

// Run follows the connection's state until ctx ends: a drop puts every call
// in flight at risk, a reconnection reads their events.
func (w *Watch) Run(ctx context.Context) {
	defer w.nc.RemoveStatusListener(w.status)
	defer w.wg.Wait()
	tick := time.NewTicker(recheck)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case st := <-w.status:
			if st != nats.CONNECTED {
				w.drop()
				continue
			}
			w.back(ctx)
		case <-tick.C:
			// A status lost to a full channel: the reconnections tell.
			w.mu.Lock()
			missed := w.nc.Stats().Reconnects != w.seen && w.nc.IsConnected()
			w.mu.Unlock()
			if missed {
				w.drop()
				w.back(ctx)
			}
		}
	}
}

// Tie registers a call sent over NATS with requestID in its header; the
// returned context ends with an error wrapping ErrLost should its reply be
// lost, and release must be called once the call is over. It is a
// client.TieFunc.
func (w *Watch) Tie(ctx context.Context, server, tool, requestID string) (context.Context, context.CancelFunc) {
	if requestID == "" {
		return ctx, func() {}
	}
	p, _ := principal.From(ctx)
	cctx, cancel := context.WithCancelCause(ctx)
	c := &call{server: server, tool: tool, principal: p.ID, start: time.Now(), cancel: cancel}
	w.mu.Lock()
	if old := w.calls[requestID]; old != nil && old.atRisk {
		w.risky--
	}
	w.calls[requestID] = c
	w.mu.Unlock()
	return cctx, func() {
		w.forget(requestID, c)
		cancel(context.Canceled)
	}
}

// forget removes c, reporting whether it was still in flight.
func (w *Watch) forget(id string, c *call) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.calls[id] != c {
		return false
	}
	delete(w.calls, id)
	if c.atRisk {
		w.risky--
	}
	return true
}

// drop puts every call in flight at risk.
func (w *Watch) drop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.droppedAt = time.Now()
	for _, c := range w.calls {
		if !c.atRisk {
			c.atRisk = true
			w.risky++
		}
	}
}

// back starts reading the call events, unless it runs already or no call
// is at risk.
func (w *Watch) back(ctx context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.upAt, w.seen = time.Now(), w.nc.Stats().Reconnects
	if w.reading || w.risky == 0 {
		return
	}
	// From the break on: the oldest call at risk, or how long a break may
	// go unseen before the drop, whichever is later.
	var oldest time.Time
	for _, c := range w.calls {
		if c.atRisk && (oldest.IsZero() || c.start.Before(oldest)) {
			oldest = c.start
		}
	}
	from := w.droppedAt.Add(-w.detect)
	if oldest.After(from) {
		from = oldest
	}
	w.reading = true
	w.wg.Add(1)
	go w.follow(ctx, from.Add(-clockSkew))
}

// follow reads the call events stored since from while calls are at risk
// (or until ctx ends), ending the calls at risk whose events it finds.
func (w *Watch) follow(ctx context.Context, from time.Time) {
	defer w.wg.Done()
	for {
		err := w.consume(ctx, from)
		w.mu.Lock()
		if ctx.Err() != nil || w.risky == 0 {
			// Under the lock: a drop meanwhile finds reading off and
			// starts another at its reconnection.
			w.reading = false
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		if err != nil {
			// A stream or consumer not reachable yet (the connection is
			// only just back): the calls wait for their replies meanwhile.
			w.log.Debug("lost replies: reading the call events failed; trying again", "error", err)
			select {
			case <-ctx.Done():
			case <-time.After(recheck):
			}
		}
	}
}

// consume reads the call events from from while calls are at risk.
func (w *Watch) consume(ctx context.Context, from time.Time) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	cons, err := w.js.OrderedConsumer(cctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{w.subject}, DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &from})
	cancel()
	if err != nil {
		return err
	}
	defer bus.DropConsumer(ctx, w.js, bus.StreamEvents, cons, 5*time.Second)
	// pending is the events still to read after the last one read; seen,
	// whether one came since the last look.
	var pending atomic.Uint64
	var seen atomic.Bool
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if md, err := m.Metadata(); err == nil {
			pending.Store(md.NumPending)
		}
		seen.Store(true)
		w.event(m)
	})
	if err != nil {
		return err
	}
	defer cc.Stop()
	tick := time.NewTicker(recheck)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		// Read to its end: nothing pending, or a whole look without an event.
		caughtUp := !seen.Swap(false) || pending.Load() == 0
		if w.settled(caughtUp) {
			return nil
		}
	}
}

// settled reports whether no call is at risk any more: none is, or the
// events were read to their end long enough after the connection came back
// that the calls still at risk got their replies (they are at risk no
// more).
func (w *Watch) settled(caughtUp bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.risky == 0 {
		return true
	}
	if !caughtUp || !w.nc.IsConnected() || time.Since(w.upAt) < settle {
		return false
	}
	for _, c := range w.calls {
		c.atRisk = false
	}
	w.risky = 0
	return true
}

// event ends, after a grace, the call at risk whose event m is, if it is
// still waiting.
func (w *Watch) event(m jetstream.Msg) {
	id := m.Headers().Get(bus.HeaderRequestID)
	if id == "" {
		return
	}
	w.mu.Lock()
	c := w.calls[id]
	risky := c != nil && c.atRisk
	w.mu.Unlock()
	if !risky {
		return
	}
	var ev model.CallEvent
	// The event of this call: of its server, for its principal, not an
	// agent's (an agent chooses its request ids).
	if json.Unmarshal(m.Data(), &ev) != nil || ev.Server != c.server || ev.Caller != "" || ev.Principal != c.principal {
		return
	}
	// Not a try that did not run (the client sends those again with the
	// same id), nor one older than this call's own.
	if ev.NotRun || ev.At.Before(c.start.Add(-clockSkew)) {
		return
	}
	time.AfterFunc(grace, func() {
		if !w.forget(id, c) {
			return // its reply came meanwhile
		}
		w.log.Warn("a call's reply was lost while the connection to NATS was down; its event says it ended",
			"server", c.server, "tool", c.tool, "request_id", id, "outcome", ev.Outcome)
		c.cancel(Lost(c.server, c.tool, id, ev))
	})
}

// Lost is the error of a call whose reply was lost, after its event ev.
func Lost(server, tool, requestID string, ev model.CallEvent) error {
	how := "ended"
	switch ev.Outcome {
	case "ok":
		how = "succeeded"
	case "tool_error":
		how = "ended with a tool error"
	case "error", "timeout", "cancelled":
		how = "failed (" + ev.Outcome + ")"
	}
	return apierr.Wrap(apierr.Network, fmt.Sprintf(
		"the call of %s %s on the server, but its reply was lost while the caller's connection to NATS was down (request id %s): it ran, so retrying runs it again",
		model.NamespacedName(server, tool), how, requestID), ErrLost)
}
