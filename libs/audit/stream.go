package audit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/bus"
)

// From is where reading starts: a stream sequence, a time, or (both
// zero) the stream's first record.
type From struct {
	Seq  uint64
	Time time.Time
}

// ReadStream passes every record of the audit stream from `from` up to its
// last one when reading began to fn, in stream order; it says whether the
// reading began at the first record the stream ever held (FromStart).
// Each wait is bounded by idle.
func ReadStream(ctx context.Context, js jetstream.JetStream, from From, idle time.Duration, fn func(Entry)) (fromStart bool, err error) {
	p, err := ReadPage(ctx, js, from, 0, idle, fn)
	return p.FromStart, err
}

// Page is what ReadPage read.
type Page struct {
	// FromStart: the page began at the first record the stream ever held.
	FromStart bool `json:"from_start"`
	// Read is how many records were passed on; Last the stream sequence of
	// the last of them (0: none).
	Read int    `json:"read"`
	Last uint64 `json:"last"`
	// End is the stream's last sequence when reading began: the page is
	// complete when Last reached it (or the stream was empty).
	End uint64 `json:"end"`
	// MaxAge is the stream's: older records leave by age
	// (VerifyOptions.Retention).
	MaxAge time.Duration `json:"-"`
	// Start is the sequence the reading should begin at (0: unknown, from
	// a time); Floor the stream's first sequence once read: what lies
	// below it left by age or size meanwhile (Verifier.SetStream).
	Start uint64 `json:"-"`
	Floor uint64 `json:"-"`
	// Unprotected says how the stream's settings let records go other
	// than by age or size ("": they do not; Verifier.SetUnprotected).
	Unprotected string `json:"-"`
}

// unprotected says what in c lets records leave other than from the
// stream's start by age or size. Services take an existing stream as it
// is (created, never updated), so one created first by another identity,
// or by hand, may lack the settings of bus.AuditStream.
func unprotected(c jetstream.StreamConfig) string {
	var why []string
	if !c.DenyDelete {
		why = append(why, "deny_delete off")
	}
	if !c.DenyPurge {
		why = append(why, "deny_purge off")
	}
	if c.Retention != jetstream.LimitsPolicy {
		why = append(why, "retention "+c.Retention.String())
	}
	if c.MaxMsgs > 0 || c.MaxMsgsPerSubject > 0 {
		why = append(why, "a message count limit")
	}
	return strings.Join(why, ", ")
}

// Complete says whether the page reached the stream's end.
func (p Page) Complete() bool { return p.Last >= p.End }

// ReadPage is ReadStream that stops after max records (0: no limit), so a
// caller can verify a long stream in bounded steps (from Last+1 on).
func ReadPage(ctx context.Context, js jetstream.JetStream, from From, max int, idle time.Duration, fn func(Entry)) (Page, error) {
	var page Page
	st, err := js.Stream(ctx, bus.StreamAudit)
	if err != nil {
		return page, fmt.Errorf("audit stream: %w", err)
	}
	info := st.CachedInfo()
	page.FromStart = from.Seq <= 1 && from.Time.IsZero() && info.State.FirstSeq <= 1
	last := info.State.LastSeq
	page.End, page.MaxAge, page.Unprotected = last, info.Config.MaxAge, unprotected(info.Config)
	if info.State.Msgs == 0 || (from.Seq > last) {
		page.End = 0
		return page, nil
	}
	cfg := jetstream.ConsumerConfig{}
	switch {
	case from.Seq > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from.Seq
	case !from.Time.IsZero():
		t := from.Time
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &t
	}
	switch {
	case from.Seq > 0:
		page.Start = from.Seq
		if info.State.FirstSeq > from.Seq { // max is the parameter
			page.Start = info.State.FirstSeq
		}
	case from.Time.IsZero():
		page.Start = info.State.FirstSeq
	}
	cons, err := bus.ReadConsumer(ctx, js, bus.StreamAudit, cfg)
	if err != nil {
		return page, fmt.Errorf("audit stream: %w", err)
	}
	defer bus.DropConsumer(ctx, js, bus.StreamAudit, cons, 2*time.Second)
	var order bus.InOrder
	// The floor is read once the records were: what left the stream's
	// start meanwhile is no gap.
	floor := func() (Page, error) {
		info, err := st.Info(ctx)
		if err != nil {
			return page, fmt.Errorf("audit stream: %w", err)
		}
		page.Floor = info.State.FirstSeq
		return page, nil
	}
	for {
		want := 1000
		if max > 0 {
			want = min(want, max-page.Read)
		}
		batch, err := cons.FetchNoWait(want)
		if err != nil {
			return page, fmt.Errorf("audit stream: %w", err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				return page, fmt.Errorf("audit stream: %w", err)
			}
			if err := order.Check(md); err != nil {
				return page, fmt.Errorf("audit stream: %w", err)
			}
			fn(Entry{StreamSeq: md.Sequence.Stream, Subject: m.Subject(), Data: m.Data()})
			page.Read++
			page.Last = md.Sequence.Stream
			if md.Sequence.Stream >= last || (max > 0 && page.Read >= max) {
				return floor()
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return page, fmt.Errorf("audit stream: %w", err)
		}
		if n == 0 { // nothing pending yet: wait a little, bounded
			select {
			case <-ctx.Done():
				return page, ctx.Err()
			case <-time.After(idle / 20):
			}
			if idle -= idle / 20; idle <= 0 {
				return page, errors.New("audit stream: no record came within the wait")
			}
		}
	}
}
