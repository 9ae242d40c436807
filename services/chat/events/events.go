// Package events publishes the events of chat turns (loop.Deps.Publish):
// each model.ChatEvent as JSON on <prefix>.events.chat.<conversation>, a
// core NATS publish that the MCP_EVENTS stream (events.>) captures.
//
// Text deltas are coalesced: those of one conversation are buffered and
// sent as one text_delta at most every Interval, or at once before any other
// event of that conversation, so a token-by-token stream does not flood the
// bus. The events of a conversation keep their order.
package events

import (
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// Defaults of Options.
const (
	DefaultInterval = 50 * time.Millisecond
	// DefaultMaxText flushes a buffered delta once its text is that long.
	DefaultMaxText = 16 << 10
)

// Options configure a Publisher; zero values take the defaults.
type Options struct {
	// Prefix is the subject prefix (default bus.DefaultPrefix).
	Prefix string
	// Interval bounds how long a text delta is held (default 50 ms; a
	// negative one disables coalescing).
	Interval time.Duration
	// MaxText flushes a buffered delta at this many bytes (default 16 KiB).
	MaxText int
	Logger  *slog.Logger
}

// Publisher publishes chat events. It is safe for concurrent use.
type Publisher struct {
	nc       *nats.Conn
	subj     bus.Subjects
	interval time.Duration
	maxText  int
	log      *slog.Logger

	mu     sync.Mutex
	buf    map[string]*delta // by conversation
	closed bool
}

// delta is a buffered text_delta of one conversation.
type delta struct {
	ev    model.ChatEvent
	timer *time.Timer
}

// New returns a publisher on nc.
func New(nc *nats.Conn, opts Options) *Publisher {
	if opts.Interval == 0 {
		opts.Interval = DefaultInterval
	}
	if opts.MaxText <= 0 {
		opts.MaxText = DefaultMaxText
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Publisher{nc: nc, subj: bus.NewSubjects(opts.Prefix), interval: opts.Interval, maxText: opts.MaxText,
		log: opts.Logger, buf: map[string]*delta{}}
}

// Subject is the subject of a conversation's events.
func (p *Publisher) Subject(conversation string) string {
	return p.subj.Event("chat", conversation)
}

// Publish sends ev (or buffers it, for a text delta); it never blocks on the
// network. Events of a conversation that is not a valid id are dropped.
func (p *Publisher) Publish(ev model.ChatEvent) {
	if !model.ValidConversationID(ev.Conversation) {
		p.log.Warn("chat events: dropped an event of an invalid conversation id", "conversation", ev.Conversation, "kind", ev.Kind)
		return
	}
	if ev.At.IsZero() {
		ev.At = time.Now().UTC()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	b := p.buf[ev.Conversation]
	if ev.Kind != model.ChatEventTextDelta || p.interval < 0 {
		if b != nil {
			p.flushLocked(ev.Conversation, b)
		}
		p.send(ev)
		return
	}
	if ev.Text == "" {
		return
	}
	if b != nil && b.ev.Turn != ev.Turn {
		p.flushLocked(ev.Conversation, b)
		b = nil
	}
	if b == nil {
		nb := &delta{ev: ev}
		conv := ev.Conversation
		nb.timer = time.AfterFunc(p.interval, func() { p.flushTimer(conv, nb) })
		p.buf[conv] = nb
		b = nb
	} else {
		b.ev.Text += ev.Text
	}
	if len(b.ev.Text) >= p.maxText {
		p.flushLocked(ev.Conversation, b)
	}
}

func (p *Publisher) flushTimer(conv string, b *delta) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.buf[conv] == b { // not flushed by an event meanwhile
		p.flushLocked(conv, b)
	}
}

func (p *Publisher) flushLocked(conv string, b *delta) {
	b.timer.Stop()
	delete(p.buf, conv)
	p.send(b.ev)
}

// send publishes under p.mu, so the events of a conversation leave in order.
func (p *Publisher) send(ev model.ChatEvent) {
	data, err := json.Marshal(ev)
	if err != nil {
		p.log.Warn("chat events: cannot encode an event", "kind", ev.Kind, "err", err)
		return
	}
	if err := p.nc.Publish(p.Subject(ev.Conversation), data); err != nil {
		p.log.Warn("chat events: publish failed", "conversation", ev.Conversation, "kind", ev.Kind, "err", err)
	}
}

// Flush sends every buffered text delta now.
func (p *Publisher) Flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for conv, b := range p.buf {
		p.flushLocked(conv, b)
	}
}

// Close flushes the buffered deltas; later events are dropped.
func (p *Publisher) Close() {
	p.Flush()
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
}
