// Package lostreplies ends the calls whose reply was lost while the
// caller's NATS connection was down.
//
// A reply published while its requester is disconnected reaches nobody
// (core NATS keeps no message for a subscriber that is gone), and the call
// would wait out its timeout (the gateway's is 60 s) to report that the
// tool did not answer, when it did, side effects included. The runner
// records every call's end in the events stream (MCP_EVENTS, the call
// event, with the request id in its header), which outlives the gap. Once
// the connection is back, a Watch reads the call events since the oldest
// call that was in flight across the drop and ends each such call whose
// event it finds: its caller learns at once that the call ran and how it
// ended, and that its answer is lost. Calls that have not ended keep
// waiting for their reply, which reaches the new connection. Only calls in
// flight across a drop are looked for, and the reading stops once none is
// left.
package lostreplies

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
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

	mu    sync.Mutex
	calls map[string]*call // request id → call in flight
	// reading is set while the events are read for calls at risk.
	reading bool
}

type call struct {
	server, tool string
	start        time.Time
	// atRisk: the connection dropped during the call, so its reply may
	// have been lost.
	atRisk bool
	cancel context.CancelCauseFunc
}

// clockSkew widens the events read before the oldest call at risk: the
// stream stamps events with its server's clock, not the caller's.
const clockSkew = 5 * time.Second

// recheck is how often the reading looks whether calls at risk remain
// when no event comes.
const recheck = time.Second

// New returns a Watch of nc's calls; Run makes it act on drops.
func New(nc *nats.Conn, prefix string, log *slog.Logger) (*Watch, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("lost replies: %w", err)
	}
	return &Watch{nc: nc, js: js, subject: bus.NewSubjects(prefix).EventsOf("call"), log: log, calls: map[string]*call{}}, nil
}

// Run follows the connection's state until ctx ends: a drop puts every call
// in flight at risk, a reconnection reads their events.
func (w *Watch) Run(ctx context.Context) {
	ch := w.nc.StatusChanged(nats.DISCONNECTED, nats.RECONNECTING, nats.CONNECTED)
	defer w.nc.RemoveStatusListener(ch)
	for {
		select {
		case <-ctx.Done():
			return
		case st := <-ch:
			if st != nats.CONNECTED {
				w.drop()
				continue
			}
			w.read(ctx)
		}
	}
}

// Tie registers a call sent over NATS with requestID in its header; the
// returned context ends with an error wrapping ErrLost should its reply be
// lost, and release must be called once the call is over.
func (w *Watch) Tie(ctx context.Context, server, tool, requestID string) (context.Context, context.CancelFunc) {
	if requestID == "" {
		return ctx, func() {}
	}
	cctx, cancel := context.WithCancelCause(ctx)
	c := &call{server: server, tool: tool, start: time.Now(), cancel: cancel}
	w.mu.Lock()
	w.calls[requestID] = c
	w.mu.Unlock()
	return cctx, func() {
		w.mu.Lock()
		if w.calls[requestID] == c {
			delete(w.calls, requestID)
		}
		w.mu.Unlock()
		cancel(context.Canceled)
	}
}

// drop puts every call in flight at risk.
func (w *Watch) drop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.calls {
		c.atRisk = true
	}
}

// read starts reading the call events, unless it runs already or no call
// is at risk.
func (w *Watch) read(ctx context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.reading {
		return
	}
	var oldest time.Time
	for _, c := range w.calls {
		if c.atRisk && (oldest.IsZero() || c.start.Before(oldest)) {
			oldest = c.start
		}
	}
	if oldest.IsZero() {
		return
	}
	w.reading = true
	go w.follow(ctx, oldest.Add(-clockSkew))
}

// follow reads the call events stored since from until no call is at risk
// (or ctx ends), ending the calls at risk whose events it finds.
func (w *Watch) follow(ctx context.Context, from time.Time) {
	defer func() {
		w.mu.Lock()
		w.reading = false
		w.mu.Unlock()
	}()
	for ctx.Err() == nil && w.atRisk() {
		err := w.consume(ctx, from)
		if err == nil || ctx.Err() != nil {
			return
		}
		// A stream or consumer not reachable yet (the connection is only
		// just back): the calls wait for their replies meanwhile.
		w.log.Debug("lost replies: reading the call events failed; trying again", "error", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(recheck):
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
	defer func() {
		if info := cons.CachedInfo(); info != nil { // not left to its inactivity timeout
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = w.js.DeleteConsumer(dctx, bus.StreamEvents, info.Name)
			cancel()
		}
	}()
	msgs, err := cons.Messages()
	if err != nil {
		return err
	}
	defer msgs.Stop()
	got := make(chan jetstream.Msg)
	failed := make(chan error, 1)
	done := make(chan struct{})
	defer close(done) // before Stop: a message on its way is let go
	go func() {
		for {
			m, err := msgs.Next()
			if err != nil {
				if !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
					failed <- err
				}
				return
			}
			select {
			case got <- m:
			case <-done:
				return
			}
		}
	}()
	tick := time.NewTicker(recheck)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-failed:
			return err
		case m := <-got:
			w.event(m)
		case <-tick.C:
		}
		if !w.atRisk() {
			return nil
		}
	}
}

// atRisk reports whether a call at risk is still in flight.
func (w *Watch) atRisk() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.calls {
		if c.atRisk {
			return true
		}
	}
	return false
}

// event ends the call at risk whose event m is.
func (w *Watch) event(m jetstream.Msg) {
	id := m.Headers().Get(bus.HeaderRequestID)
	if id == "" {
		return
	}
	w.mu.Lock()
	c := w.calls[id]
	w.mu.Unlock()
	if c == nil || !w.risky(c) {
		return
	}
	var ev model.CallEvent
	if json.Unmarshal(m.Data(), &ev) != nil || ev.Server != c.server {
		return // not this call's: a request id reused for another server
	}
	w.mu.Lock()
	mine := w.calls[id] == c
	if mine {
		delete(w.calls, id)
	}
	w.mu.Unlock()
	if !mine {
		return // its reply came meanwhile
	}
	w.log.Warn("a call's reply was lost while the connection to NATS was down; its event says it ended",
		"server", c.server, "tool", c.tool, "request_id", id, "outcome", ev.Outcome)
	c.cancel(Lost(c.server, c.tool, id, ev))
}

func (w *Watch) risky(c *call) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return c.atRisk
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
		"the call of %s.%s %s on the server, but its reply was lost while the caller's connection to NATS was down (request id %s): it ran, so retrying runs it again",
		server, tool, how, requestID), ErrLost)
}
