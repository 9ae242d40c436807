package audit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/mcpbus/mcpbus/libs/bus"
)

// WriterOptions configure a Writer; zero values take the defaults.
type WriterOptions struct {
	Prefix string
	// Role is the writer's bus role (runner, config, …): with its key it
	// names the chain, and the permission table lets a role write only
	// under <prefix>.audit.<role>.
	Role string
	// Key is the writer's nkey (the identity it connects with).
	Key nkeys.KeyPair
	// Queue is how many events may wait to be written (default 4096);
	// beyond it an event is dropped, counted and logged, never waited for.
	Queue int
	// Timeout bounds one JetStream write (default 2s).
	Timeout time.Duration
	// Linger is how long the writer waits after an event for others to
	// share its record (default 5ms; negative: none). A record is one
	// signature and one JetStream round trip: without it a lone caller's
	// every call paid both.
	Linger time.Duration
	Logger *slog.Logger
}

// Writer appends one writer's events to its chain. Append is what a call
// path does: it queues the event and returns; one goroutine seals (hash,
// sign) and stores the records in order, each write expecting the chain's
// last stream sequence, so two processes sharing an identity interleave
// without forking the chain, and a restarted writer continues the chain
// from the stream's last record of its subject.
type Writer struct {
	js      jetstream.JetStream
	nc      *nats.Conn
	opts    WriterOptions
	chain   string
	subject string
	sign    signer // opts.Key's
	log     *slog.Logger

	q       *queue
	dropped atomic.Uint64
	closing chan struct{} // closed by Close: write what is queued, then stop
	done    chan struct{}
	stop    context.CancelFunc
	once    sync.Once

	// The chain's head (the writing goroutine's, or Write's under mu).
	mu      sync.Mutex
	synced  bool
	seq     uint64 // the chain's last Seq
	prev    string // its Hash
	lastSeq uint64 // its stream sequence
	// pending is the sealed record of an event not yet acknowledged.
	pending *Record
}

var errNotJSON = errors.New("audit: the event is not JSON")

type item struct {
	subject string
	event   []byte
}

// NewWriter starts the writer of opts.Role's chain on nc; Close stops it.
func NewWriter(nc *nats.Conn, opts WriterOptions) (*Writer, error) {
	if opts.Key == nil {
		return nil, errors.New("audit: a writer needs its nkey")
	}
	pub, err := opts.Key.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	if opts.Queue <= 0 {
		opts.Queue = 4096
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 2 * time.Second
	}
	if opts.Linger == 0 {
		opts.Linger = DefaultLinger
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	chain := ChainOf(opts.Role, pub)
	ctx, stop := context.WithCancel(context.Background())
	w := &Writer{js: js, nc: nc, opts: opts, chain: chain, subject: bus.NewSubjects(opts.Prefix).Audit(chain), sign: signerOf(opts.Key),
		log: opts.Logger.With("audit_chain", chain), q: newQueue(opts.Queue), closing: make(chan struct{}), done: make(chan struct{}), stop: stop}
	go w.run(ctx)
	return w, nil
}

// Chain is the writer's chain name.
func (w *Writer) Chain() string { return w.chain }

// Dropped is how many events were dropped because the queue was full.
func (w *Writer) Dropped() uint64 { return w.dropped.Load() }

// Append queues an event (its subject and JSON) for the chain; it never
// blocks. A nil Writer (no identity to sign with) does nothing; after
// Close the event stays unwritten (the queue is never closed, so a call
// finishing late cannot panic).
func (w *Writer) Append(subject string, event []byte) {
	if w == nil {
		return
	}
	if !w.q.push(item{subject, event}) {
		if n := w.dropped.Add(1); n&(n-1) == 0 { // log at 1, 2, 4, 8 … drops
			w.log.Error("audit queue full: events dropped", "dropped", n)
		}
	}
}

// Close writes what is queued (for at most timeout) and stops the writer.
func (w *Writer) Close(timeout time.Duration) {
	if w == nil {
		return
	}
	w.once.Do(func() {
		close(w.closing)
		select {
		case <-w.done:
		case <-time.After(timeout):
			w.stop()
			<-w.done
		}
		w.stop()
	})
}

// A record holds at most maxBatch events and about maxBatchBytes of them
// (NATS's default max_payload is 1 MiB), or one event of up to the bus's
// max_payload.
const (
	maxBatch      = 256
	maxBatchBytes = 256 << 10
)

// DefaultLinger is WriterOptions.Linger's default.
const DefaultLinger = 5 * time.Millisecond

func (w *Writer) run(ctx context.Context) {
	defer close(w.done)
	var linger *time.Timer // one, reused
	var carry []Event      // an event that did not fit the last record: the next one's first
	for {
		if len(carry) == 0 {
			it, ok := w.q.pop()
			if !ok {
				select {
				case <-w.q.ready:
					continue
				case <-w.closing:
					if it, ok = w.q.pop(); !ok { // what was queued before Close is written first
						return
					}
				}
			}
			if carry = w.event(nil, it); len(carry) == 0 {
				continue
			}
		}
		if w.opts.Linger > 0 && w.q.waiting() < maxBatch {
			if linger == nil {
				linger = time.NewTimer(w.opts.Linger)
			} else {
				linger.Reset(w.opts.Linger)
			}
			select {
			case <-linger.C:
			case <-w.closing: // Close writes what is queued at once
				linger.Stop()
			}
		}
		// What queued up while the last record was stored goes into one
		// record: one signature and one round trip for all of it, within
		// maxBatchBytes (an event that would pass it opens the next record).
		batch, size := carry, entrySize(carry[0])
		carry = nil
		limit := min(maxBatchBytes, int(w.nc.MaxPayload()-recordHeadroom))
		for len(batch) < maxBatch {
			it, ok := w.q.pop()
			if !ok {
				break
			}
			next := w.event(nil, it)
			if len(next) == 0 {
				continue
			}
			if size+entrySize(next[0]) > limit {
				carry = next
				break
			}
			batch, size = append(batch, next[0]), size+entrySize(next[0])
		}
		w.store(ctx, batch)
	}
}

// store writes batch as one record, retrying until it is stored or the
// writer stops: the chain keeps its events in order, so nothing after them
// is written before. A record the bus refuses for its size is split, and a
// lone event too large for it stands in by its digest (oversized).
func (w *Writer) store(ctx context.Context, batch []Event) {
	for attempt := 0; ; attempt++ {
		err := w.WriteEvents(ctx, batch)
		if err == nil || ctx.Err() != nil {
			return
		}
		if errors.Is(err, nats.ErrMaxPayload) {
			if len(batch) > 1 {
				w.store(ctx, batch[:len(batch)/2])
				w.store(ctx, batch[len(batch)/2:])
				return
			}
			if o := oversized(batch[0], w.nc.MaxPayload()-recordHeadroom); !bytes.Equal(o.Event, batch[0].Event) {
				batch = []Event{o}
				continue
			}
		}
		if attempt == 0 || attempt%30 == 0 {
			w.log.Warn("audit write failed; retrying", "error", err, "attempt", attempt+1)
		}
		select {
		case <-ctx.Done():
		case <-time.After(min(time.Duration(attempt+1)*100*time.Millisecond, 2*time.Second)):
		}
	}
}

// entrySize is about what e adds to a record's JSON: encoding/json writes
// <, > and & of an event as \u003c (6 bytes each).
func entrySize(e Event) int {
	escaped := 0
	for _, c := range e.Event {
		if c == '<' || c == '>' || c == '&' {
			escaped += 5
		}
	}
	return len(e.Subject) + len(e.Event) + escaped + 32
}

// event appends it to batch, compacted, or in its stead its digest when it
// could not fit one record (oversized); an event that is not JSON is
// dropped and logged.
func (w *Writer) event(batch []Event, it item) []Event {
	stored, err := storedForm(it.event)
	if err != nil {
		w.log.Error("audit: an event that is not JSON was dropped", "subject", it.subject)
		return batch
	}
	e := Event{Subject: it.subject, Event: stored}
	if limit := w.nc.MaxPayload() - recordHeadroom; int64(entrySize(e)) > limit {
		e = oversized(e, limit)
		w.log.Warn("audit: an event too large for one record is kept as its digest", "subject", it.subject, "bytes", len(stored))
	}
	return append(batch, e)
}

// recordHeadroom is what a record needs besides its events' entries: its
// other fields and the message's headers.
const recordHeadroom = 16 << 10

// fieldKept is the largest top-level field an oversized event keeps.
const fieldKept = 1 << 10

// oversized stands in for e, an event too large for one record (a
// tool_changed event quotes two tool definitions, each up to a catalog's
// size): its top-level fields of up to fieldKept bytes (what names the
// server, the tool, the principal) and, under "audit_oversized", the
// original's size and SHA-256, so that a copy kept elsewhere can be
// matched to it. limit ≤ 0: keep no field.
func oversized(e Event, limit int64) Event {
	sum := sha256.Sum256(e.Event)
	kept := map[string]json.RawMessage{}
	var fields map[string]json.RawMessage
	if limit > 0 && json.Unmarshal(e.Event, &fields) == nil {
		size := int64(0)
		for k, v := range fields {
			if len(v) <= fieldKept && size+int64(len(k)+len(v)) < limit/2 {
				kept[k], size = v, size+int64(len(k)+len(v)+4)
			}
		}
	}
	note, _ := json.Marshal(map[string]any{"bytes": len(e.Event), "sha256": hex.EncodeToString(sum[:])})
	kept["audit_oversized"] = note
	out, _ := json.Marshal(kept)
	return Event{Subject: e.Subject, Event: out}
}

// Write appends one event at once and returns when it is stored (tests
// and tools; services use Append).
func (w *Writer) Write(ctx context.Context, subject string, event []byte) error {
	stored, err := storedForm(event)
	if err != nil {
		return fmt.Errorf("%w: %w", errNotJSON, err)
	}
	return w.WriteEvents(ctx, []Event{{Subject: subject, Event: stored}})
}

// storedForm is event as a record stores it: compact, and with <, >, &,
// U+2028 and U+2029 escaped as encoding/json writes a RawMessage. The
// record's hash covers these bytes, so they must be the ones stored (a
// raw "<" was signed, stored as \u003c and never verified).
func storedForm(event []byte) ([]byte, error) {
	var compact, escaped bytes.Buffer
	if err := json.Compact(&compact, event); err != nil {
		return nil, err
	}
	json.HTMLEscape(&escaped, compact.Bytes())
	return escaped.Bytes(), nil
}

// WriteEvents appends events (compact JSON) as one record and returns when
// it is stored.
func (w *Writer) WriteEvents(ctx context.Context, events []Event) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p := w.pending; p != nil && !sameEvents(p.Events, events) {
		w.pending = nil // new events: the unacknowledged record was given up
	}
	for try := range 50 {
		if try > 0 && !w.synced { // another writer of this chain won the race: let it run
			time.Sleep(time.Duration(rand.IntN(2000*try)) * time.Microsecond)
		}
		if !w.synced {
			if err := w.resync(ctx); err != nil {
				return err
			}
		}
		if p := w.pending; p != nil && w.prev == p.Hash {
			w.pending = nil // stored before, its ack lost
			return nil
		}
		if p := w.pending; p == nil || p.Seq != w.seq+1 || p.Prev != w.prev {
			rec := &Record{V: Version, Chain: w.chain, Seq: w.seq + 1, Prev: w.prev, Time: time.Now().UTC(), Events: events}
			if err := rec.seal(w.sign); err != nil {
				return err
			}
			w.pending = rec
		}
		rec := w.pending
		data, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		// A retry sends the same record with the same message id: after a
		// lost ack it is a duplicate, not a second record; the expected
		// sequence keeps the chain linear.
		msg := &nats.Msg{Subject: w.subject, Data: data}
		wctx, cancel := context.WithTimeout(ctx, w.opts.Timeout)
		ack, err := w.js.PublishMsg(wctx, msg, jetstream.WithMsgID(w.chain+":"+strconv.FormatUint(rec.Seq, 10)+":"+rec.Hash[:16]),
			jetstream.WithExpectLastSequencePerSubject(w.lastSeq))
		cancel()
		var apiErr *jetstream.APIError
		switch {
		case err == nil:
			w.seq, w.prev, w.lastSeq, w.pending = rec.Seq, rec.Hash, ack.Sequence, nil
			return nil
		case errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence:
			w.synced = false // stored already, or another process of this identity wrote
		default:
			return fmt.Errorf("audit: %w", err)
		}
	}
	return errors.New("audit: the chain kept moving under this writer")
}

func sameEvents(a, b []Event) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Subject != b[i].Subject || !bytes.Equal(a[i].Event, b[i].Event) {
			return false
		}
	}
	return true
}

// resync reads the chain's last record (a direct get by subject, which the
// table lets a role do on its own chains only).
func (w *Writer) resync(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, w.opts.Timeout)
	defer cancel()
	m, err := w.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+bus.StreamAudit+"."+w.subject, nil)
	if err != nil {
		return fmt.Errorf("audit: reading the chain's head: %w", err)
	}
	if st := m.Header.Get("Status"); st == "404" {
		w.seq, w.prev, w.lastSeq, w.synced = 0, "", 0, true
		return nil
	} else if st != "" {
		return fmt.Errorf("audit: reading the chain's head: status %s %s", st, m.Header.Get("Description"))
	}
	var rec Record
	if err := json.Unmarshal(m.Data, &rec); err != nil {
		return fmt.Errorf("audit: the chain's head: %w", err)
	}
	seq, err := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
	if err != nil {
		return fmt.Errorf("audit: the chain's head has no sequence: %w", err)
	}
	w.seq, w.prev, w.lastSeq, w.synced = rec.Seq, rec.Hash, seq, true
	return nil
}
