package rest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
)

// EventKinds are the event kinds /api/v1/events can stream.
var EventKinds = []string{"status", "config", "call", "chat", "oauth", "tool_changed", "tool_reviewed", "gateway"}

// defaultEventKinds are streamed when ?kinds= is absent.
var defaultEventKinds = []string{"status", "call"}

// Event is the data of one Server-Sent Event: a bus event and where it came from.
type Event struct {
	Kind    string          `json:"kind"`
	Name    string          `json:"name"`
	Subject string          `json:"subject"`
	Time    time.Time       `json:"time,omitzero"`
	Data    json.RawMessage `json:"data"`
}

const (
	eventBuffer       = 256
	eventWriteTimeout = 10 * time.Second
)

// events streams bus events as Server-Sent Events (event: <kind>, id: the
// stream sequence) until the client goes. ?kinds=status,call picks the kinds;
// Last-Event-ID (or ?since=) resumes after a sequence. A client too slow to
// keep up is disconnected rather than silently skipped: its EventSource
// reconnects with Last-Event-ID and misses nothing.
//
// It reads the stream with its own ordered consumer instead of
// client.FollowEvents so that the consumer exists before the 200 goes out:
// setup errors become a proper 503, and a client that got the first frame
// knows every later event reaches it.
func (a *API) events(w http.ResponseWriter, r *http.Request) {
	kinds, err := eventKinds(r.URL.Query().Get("kinds"))
	if err != nil {
		writeError(w, err)
		return
	}
	// The inactivity threshold is a backstop for consumers a crash leaves behind.
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy, InactiveThreshold: time.Minute}
	for _, k := range kinds {
		cfg.FilterSubjects = append(cfg.FilterSubjects, a.subj.EventsOf(k))
	}
	if err := resume(r, &cfg); err != nil {
		writeError(w, err)
		return
	}
	a.stream(w, r, cfg, a.frame, nil)
}

// resume starts cfg after the event id of Last-Event-ID (or ?since=).
func resume(r *http.Request, cfg *jetstream.OrderedConsumerConfig) error {
	since := r.Header.Get("Last-Event-ID")
	if since == "" {
		since = r.URL.Query().Get("since")
	}
	if since == "" {
		return nil
	}
	seq, err := strconv.ParseUint(since, 10, 64)
	if err != nil {
		return apierr.Invalid("since", "Last-Event-ID / since must be an event id (a stream sequence)")
	}
	cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, seq+1
	return nil
}

// framer renders one message of the events stream as an SSE frame (ok:
// the message is one a client can read); last ends the stream after it.
type framer func(jetstream.Msg) (frame string, ok, last bool)

// ender tells, at each heartbeat, whether what a stream follows has ended
// though no last frame came (the event that said so was lost): ended, and
// the frame that ends the stream.
type ender func(context.Context) (frame string, ended bool)

// stream serves the messages of the events stream that cfg selects as
// Server-Sent Events (frame renders one) until the client, the key or the
// gateway goes, or a frame is the last, or ended (nil: never) says so at a
// heartbeat, with heartbeats; the conventions of /api/v1/events.
func (a *API) stream(w http.ResponseWriter, r *http.Request, cfg jetstream.OrderedConsumerConfig, frame framer, ended ender) {
	select {
	case <-a.streams:
		writeError(w, apierr.New(apierr.ServiceUnavailable, "the gateway is shutting down"))
		return
	default:
	}
	// HEAD, which the mux routes to GET, gets the stream's head and no
	// stream: a HEAD answer has no body, so its client takes it as complete
	// at once and sends its next request on the connection, which a handler
	// still streaming would never read (that request hangs), holding one of
	// the key's streams meanwhile.
	if r.Method == http.MethodHead {
		sseHeaders(w)
		w.WriteHeader(http.StatusOK)
		return
	}
	ctx := r.Context()
	var revoked <-chan struct{}
	if p := auth.PrincipalFrom(ctx); p != nil {
		var untrack func()
		var ok bool
		if revoked, untrack, ok = a.track(p.KeyID, p.Bus().ID); !ok {
			writeError(w, apierr.Newf(apierr.RateLimited, "you have %d event streams open already; close one first", a.opts.MaxStreams))
			return
		}
		defer untrack()
	}
	epoch := a.nc.Stats().Reconnects
	// A stream of new events starts after the stream's last one, which the
	// first frame names (an id-only event sets the client's last event id):
	// a client that gets no event before a drop resumes from there, and
	// misses nothing published meanwhile.
	connected := "retry: 2000\n: connected\n\n"
	if cfg.DeliverPolicy == jetstream.DeliverNewPolicy {
		last, err := bus.StartAfterLast(ctx, a.js, bus.StreamEvents, &cfg)
		if err != nil {
			writeError(w, apierr.Wrap(apierr.ServiceUnavailable, "following events: "+err.Error(), err))
			return
		}
		connected = fmt.Sprintf("retry: 2000\nid: %d\n: connected\n\n", last)
	}
	cons, err := a.js.OrderedConsumer(ctx, bus.StreamEvents, cfg)
	if err != nil {
		writeError(w, apierr.Wrap(apierr.ServiceUnavailable, "following events: "+err.Error(), err))
		return
	}
	ch := make(chan jetstream.Msg, eventBuffer)
	overflow := make(chan struct{})
	closeOverflow := sync.OnceFunc(func() { close(overflow) })
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case ch <- m:
		default:
			closeOverflow()
		}
	})
	if err != nil {
		writeError(w, apierr.Wrap(apierr.ServiceUnavailable, "following events: "+err.Error(), err))
		return
	}
	defer func() {
		cc.Stop()
		bus.DropConsumer(ctx, a.js, bus.StreamEvents, cons, 5*time.Second)
	}()

	rc := http.NewResponseController(w)
	sseHeaders(w)
	w.WriteHeader(http.StatusOK)
	write := func(s string) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(eventWriteTimeout))
		if _, err := w.Write([]byte(s)); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write(connected) {
		return
	}
	beat := time.NewTicker(a.opts.Heartbeat)
	defer beat.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.streams:
			return
		case <-revoked:
			a.log.Info("API key revoked: its event stream was ended")
			return
		case <-overflow:
			a.log.Warn("event stream client too slow, disconnecting it")
			return
		case <-beat.C:
			if a.nc.Stats().Reconnects != epoch {
				// The consumer may not have survived (a restarted server):
				// the client reconnects with Last-Event-ID (the first
				// frame's, if no event came) and misses nothing.
				return
			}
			if !write(": ping\n\n") {
				return
			}
			if ended == nil {
				continue
			}
			if f, ok := ended(ctx); ok {
				// The last event may be on its way still: what came is
				// written first, and ends the stream if it is the last.
				for len(ch) > 0 {
					f, ok, last := frame(<-ch)
					if ok && !write(f) || last {
						return
					}
				}
				write(f)
				return
			}
		case m := <-ch:
			f, ok, last := frame(m)
			if ok && !write(f) || last {
				return
			}
		}
	}
}

// track registers an event stream of keyID, the key of principal who:
// gone closes when DropKey(keyID) is called; untrack forgets it when the
// stream ends. ok is false, and nothing registered, when the principal
// has MaxStreams open already.
func (a *API) track(keyID, who string) (gone <-chan struct{}, untrack func(), ok bool) {
	ch := make(chan struct{})
	a.keyMu.Lock()
	if a.perWho[who] >= a.opts.MaxStreams {
		a.keyMu.Unlock()
		return nil, nil, false
	}
	a.perWho[who]++
	set := a.byKey[keyID]
	if set == nil {
		set = map[chan struct{}]struct{}{}
		a.byKey[keyID] = set
	}
	set[ch] = struct{}{}
	a.keyMu.Unlock()
	return ch, func() {
		a.keyMu.Lock()
		defer a.keyMu.Unlock()
		if a.perWho[who]--; a.perWho[who] <= 0 {
			delete(a.perWho, who)
		}
		if set, ok := a.byKey[keyID]; ok {
			delete(set, ch)
			if len(set) == 0 {
				delete(a.byKey, keyID)
			}
		}
	}, true
}

// DropKey ends every event stream opened with keyID, denies the calls it
// has held for approval and cancels its tasks still working and its running
// chat turns: called when the key is revoked (auth.KeyStore.OnRevoke), so a
// revoked key keeps nothing open and nothing runs in its name later.
func (a *API) DropKey(keyID string) {
	a.keyMu.Lock()
	set := a.byKey[keyID]
	delete(a.byKey, keyID)
	a.keyMu.Unlock()
	for ch := range set {
		close(ch)
	}
	go a.denyHeld(keyID)
	go a.cancelTasks(keyID)
	go a.cancelTurns(keyID)
}

// frame renders one bus message as an SSE frame.
func (a *API) frame(m jetstream.Msg) (string, bool, bool) {
	rel := strings.TrimPrefix(m.Subject(), a.subj.Prefix+".")
	ev := Event{Kind: bus.TokenAt(rel, 1), Name: bus.TokenAt(rel, 2), Subject: m.Subject()}
	var buf bytes.Buffer
	if err := json.Compact(&buf, m.Data()); err != nil {
		return "", false, false // not JSON: nothing a client could read
	}
	ev.Data = buf.Bytes()
	var seq uint64
	if md, err := m.Metadata(); err == nil {
		ev.Time, seq = md.Timestamp.UTC(), md.Sequence.Stream
	}
	data, err := json.Marshal(ev)
	if err != nil {
		return "", false, false
	}
	return fmt.Sprintf("id: %d\nevent: %s\ndata: %s\n\n", seq, ev.Kind, data), true, false
}

// eventKinds parses ?kinds= (comma separated).
func eventKinds(v string) ([]string, error) {
	if strings.TrimSpace(v) == "" {
		return defaultEventKinds, nil
	}
	var out []string
	for _, k := range strings.Split(v, ",") {
		k = strings.TrimSpace(k)
		if !slices.Contains(EventKinds, k) {
			return nil, apierr.Invalid("kinds", fmt.Sprintf("unknown event kind %q (%s)", k, strings.Join(EventKinds, ", ")))
		}
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out, nil
}

// sseHeaders sets the headers of an event stream's answer.
func sseHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // no proxy buffering
}
