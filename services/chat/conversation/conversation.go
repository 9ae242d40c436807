// Package conversation is the durable log of chat conversations: one
// JetStream stream (bus.StreamChat), one subject per conversation
// (<prefix>.chat.log.<conversation>), entries numbered from 1 without gaps.
// Appends are optimistic: each states the stream sequence of the subject's
// last message it saw, so two chat instances cannot both write entry N of a
// conversation; the second gets CONFLICT and must read the log again.
package conversation

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// DefaultMaxBytes bounds the log. Reserved at creation: with the other
// streams' bounds it stays well under what a server offers on a half-full
// disk (6 GiB in all, the tasks bucket's included); mcpbus up scales it down on a smaller one.
const DefaultMaxBytes = 2 << 30

// Options configure a Log; zero values take the defaults.
type Options struct {
	// Prefix is the subject prefix (default bus.DefaultPrefix).
	Prefix string
	// Replicas of the stream (1 embedded, 3 on a cluster); an existing
	// stream keeps its own settings.
	Replicas int
	// MaxAge drops conversations' entries older than this (0: kept until deleted).
	MaxAge time.Duration
	// MaxBytes bounds the stream (default DefaultMaxBytes); when full,
	// appends are refused. An existing stream's larger bound is kept.
	MaxBytes int64
	// Logger hears what start-up waits for.
	Logger *slog.Logger
	// Now is the clock of the entries' time (default time.Now).
	Now func() time.Time
}

// Log is the conversation log. It is safe for concurrent use.
type Log struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	// root is <prefix>.chat.log: a conversation's subject is root.<id>.
	root string
	now  func() time.Time
}

// appendTries bounds the attempts of an append at the next free slot
// (Seq 0) that keeps losing races.
const appendTries = 5

// Open creates (or updates) the stream and returns the log. It retries until
// ctx ends while JetStream settles (bus.Setup).
func Open(ctx context.Context, js jetstream.JetStream, opts Options) (*Log, error) {
	if opts.Replicas <= 0 {
		opts.Replicas = 1
	}
	if opts.MaxBytes == 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	root := bus.NewSubjects(opts.Prefix).Service("chat", "log")
	cfg := jetstream.StreamConfig{
		Name:        bus.StreamChat,
		Description: "mcpbus chat conversation logs: one subject per conversation",
		Subjects:    []string{root + ".>"},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      opts.MaxAge,
		MaxBytes:    opts.MaxBytes,
		// A full log refuses appends rather than forgetting the start of
		// conversations.
		Discard:  jetstream.DiscardNew,
		Replicas: opts.Replicas,
		// Gets go to the leader: a follower's answer may lag an append.
		AllowDirect: false,
	}
	l := &Log{js: js, root: root, now: opts.Now}
	err := bus.Setup(ctx, opts.Logger, "stream "+bus.StreamChat, func(ctx context.Context) (err error) {
		// One made by another instance with other settings is used as it is.
		l.stream, err = bus.CreateAsset(ctx, js, cfg.Name,
			func(ctx context.Context) (jetstream.Stream, error) { return bus.FitStream(ctx, js, cfg, opts.Logger) },
			func(ctx context.Context) (jetstream.Stream, error) { return js.Stream(ctx, cfg.Name) })
		return err
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// Subject is the subject of a conversation's entries.
func (l *Log) Subject(conversation string) string { return l.root + "." + conversation }

func checkID(conversation string) error {
	if !model.ValidConversationID(conversation) {
		return apierr.Invalid("conversation", fmt.Sprintf("conversation %q must be a slug or a uuid (a-z, 0-9, '-', '_'; at most 64)", conversation))
	}
	return nil
}

// position is where a conversation's log ends: the last entry's seq and its
// stream sequence (0, 0 for an empty log).
type position struct {
	seq       uint64
	streamSeq uint64
	at        time.Time
}

// last reads the end of a conversation's log. The read rides out a leader
// election (bus.Retry): a request sent while the stream has no leader goes
// unanswered, and without a retry a turn waited out its whole deadline.
func (l *Log) last(ctx context.Context, conversation string) (position, error) {
	msg, err := bus.RetryValue(ctx, func(ctx context.Context, _ int) (*jetstream.RawStreamMsg, error) {
		return l.stream.GetLastMsgForSubject(ctx, l.Subject(conversation))
	})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return position{}, nil
	}
	if err != nil {
		return position{}, bus.JetStreamErr("reading the end of conversation "+conversation, err)
	}
	var e model.ChatEntry
	if err := json.Unmarshal(msg.Data, &e); err != nil || e.Seq == 0 {
		return position{}, apierr.Newf(apierr.Internal, "conversation %s: its last entry (stream sequence %d) is malformed", conversation, msg.Sequence)
	}
	return position{seq: e.Seq, streamSeq: msg.Sequence, at: msg.Time}, nil
}

// Append writes e as the next entry of conversation and returns it as
// stored. e.Seq claims a slot: it must be the next one (else CONFLICT, as it
// is when another writer takes that slot first); 0 takes the next free slot,
// whatever it is. e.At defaults to now.
func (l *Log) Append(ctx context.Context, conversation string, e model.ChatEntry) (model.ChatEntry, error) {
	if err := checkID(conversation); err != nil {
		return model.ChatEntry{}, err
	}
	if err := e.Validate(); err != nil {
		return model.ChatEntry{}, err
	}
	if e.At.IsZero() {
		e.At = l.now()
	}
	e.At = e.At.UTC()
	claim := e.Seq
	for try := 1; ; try++ {
		pos, err := l.last(ctx, conversation)
		if err != nil {
			return model.ChatEntry{}, err
		}
		if claim != 0 && claim != pos.seq+1 {
			return model.ChatEntry{}, conflict(conversation, claim, pos.seq)
		}
		e.Seq = pos.seq + 1
		_, err = l.publish(ctx, conversation, e, pos.streamSeq)
		if err == nil {
			return e, nil
		}
		if !wrongLast(err) {
			return model.ChatEntry{}, err
		}
		if claim != 0 || try >= appendTries {
			return model.ChatEntry{}, conflict(conversation, e.Seq, pos.seq)
		}
	}
}

// Tail is where a conversation's log ends: the last entry's Seq and the
// stream sequence of its message (both 0 for an empty log).
type Tail struct {
	Seq       uint64
	StreamSeq uint64
}

// AppendAfter writes e as the entry right after tail, which the caller got
// from ReadTail or from its own previous append, and returns it as stored
// with the new tail. It does not read the log first: the publish expects
// tail.StreamSeq to be the subject's last message, so when another writer
// appended since, it fails with CONFLICT (it is not retried). e.Seq must be
// 0 or tail.Seq+1; e.At defaults to now.
func (l *Log) AppendAfter(ctx context.Context, conversation string, tail Tail, e model.ChatEntry) (model.ChatEntry, Tail, error) {
	if err := checkID(conversation); err != nil {
		return model.ChatEntry{}, Tail{}, err
	}
	if err := e.Validate(); err != nil {
		return model.ChatEntry{}, Tail{}, err
	}
	if e.Seq != 0 && e.Seq != tail.Seq+1 {
		return model.ChatEntry{}, Tail{}, conflict(conversation, e.Seq, tail.Seq)
	}
	if e.At.IsZero() {
		e.At = l.now()
	}
	e.At = e.At.UTC()
	e.Seq = tail.Seq + 1
	streamSeq, err := l.publish(ctx, conversation, e, tail.StreamSeq)
	if wrongLast(err) {
		return model.ChatEntry{}, Tail{}, conflict(conversation, e.Seq, tail.Seq)
	}
	if err != nil {
		return model.ChatEntry{}, Tail{}, err
	}
	return e, Tail{Seq: e.Seq, StreamSeq: streamSeq}, nil
}

// publish writes e on the condition that the subject's last message is at
// stream sequence last, and returns e's stream sequence. A failed condition
// is returned as JetStream's error (wrongLast), others as the contract's.
// The publish rides out a leader election (bus.Retry); a retry that finds
// the condition failed because an earlier, unanswered try stored e succeeds
// with that try's sequence (stored), so e is written once.
func (l *Log) publish(ctx context.Context, conversation string, e model.ChatEntry, last uint64) (uint64, error) {
	data, err := json.Marshal(e)
	if err != nil {
		return 0, apierr.Wrap(apierr.Internal, "encoding a conversation entry", err)
	}
	seq, err := bus.RetryValue(ctx, func(ctx context.Context, try int) (uint64, error) {
		ack, err := l.js.Publish(ctx, l.Subject(conversation), data,
			jetstream.WithExpectStream(bus.StreamChat), jetstream.WithExpectLastSequencePerSubject(last))
		if err == nil {
			return ack.Sequence, nil
		}
		if try > 1 && wrongLast(err) {
			return l.stored(ctx, conversation, data, last, err)
		}
		return 0, err
	})
	if err != nil {
		if wrongLast(err) {
			return 0, err
		}
		return 0, bus.JetStreamErr("appending to conversation "+conversation, err)
	}
	return seq, nil
}

// stored resolves a failed condition met by a retried publish: if the
// subject's last message, after last, is data, an earlier unanswered try
// wrote it and its sequence is the publish's; otherwise failed stands.
func (l *Log) stored(ctx context.Context, conversation string, data []byte, last uint64, failed error) (uint64, error) {
	msg, err := l.stream.GetLastMsgForSubject(ctx, l.Subject(conversation))
	if err != nil {
		if bus.Transient(err) {
			return 0, err
		}
		return 0, failed
	}
	if msg.Sequence > last && bytes.Equal(msg.Data, data) {
		return msg.Sequence, nil
	}
	return 0, failed
}

func conflict(conversation string, seq, last uint64) error {
	return apierr.Newf(apierr.Conflict, "conversation %s: entry %d cannot be appended (another writer got there first; the log had %d entries)", conversation, seq, last)
}

// wrongLast reports a failed expectation of the subject's last sequence.
func wrongLast(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
	}
	return false
}

// Read returns the entries of conversation in order; an unknown (or
// deleted) conversation is NOT_FOUND.
func (l *Log) Read(ctx context.Context, conversation string) ([]model.ChatEntry, error) {
	entries, _, err := l.ReadTail(ctx, conversation)
	return entries, err
}

// ReadTail is Read that also returns where the entries end, for the
// AppendAfter of the next entry. An unknown conversation is NOT_FOUND with
// the tail of an empty log.
func (l *Log) ReadTail(ctx context.Context, conversation string) ([]model.ChatEntry, Tail, error) {
	if err := checkID(conversation); err != nil {
		return nil, Tail{}, err
	}
	end, err := l.last(ctx, conversation)
	if err != nil {
		return nil, Tail{}, err
	}
	if end.seq == 0 {
		return nil, Tail{}, apierr.Newf(apierr.NotFound, "conversation %s not found", conversation)
	}
	// A fetch that went unanswered (the consumer's node cut off or gone
	// while it was read: it is R1, in memory) is a read to begin again
	// with a new consumer, until ctx ends (30 s when it has no deadline).
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		entries, tail, err := l.readTo(ctx, conversation, end)
		var fetch *fetchError
		if !errors.As(err, &fetch) {
			return entries, tail, err
		}
		if !bus.Transient(fetch.err) || ctx.Err() != nil {
			return nil, Tail{}, bus.JetStreamErr("reading conversation "+conversation, fetch.err)
		}
		select {
		case <-ctx.Done():
			return nil, Tail{}, bus.JetStreamErr("reading conversation "+conversation, fetch.err)
		case <-time.After(wait):
		}
	}
}

// fetchError is a failed fetch of readTo, which ReadTail may try again.
type fetchError struct{ err error }

func (e *fetchError) Error() string { return e.err.Error() }

// readTo reads conversation's entries up to end through a consumer of its own.
func (l *Log) readTo(ctx context.Context, conversation string, end position) ([]model.ChatEntry, Tail, error) {
	cons, err := bus.ReadConsumer(ctx, l.js, bus.StreamChat, jetstream.ConsumerConfig{
		FilterSubject: l.Subject(conversation),
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, Tail{}, bus.JetStreamErr("reading conversation "+conversation, err)
	}
	defer bus.DropConsumer(ctx, l.js, bus.StreamChat, cons, 2*time.Second)
	entries := make([]model.ChatEntry, 0, end.seq)
	var tail Tail // of the entries read so far
	var order bus.InOrder
	for {
		wait := 5 * time.Second
		if d, ok := ctx.Deadline(); ok {
			wait = max(min(wait, time.Until(d)), 10*time.Millisecond)
		}
		batch, err := cons.Fetch(256, jetstream.FetchMaxWait(wait))
		if err != nil {
			return nil, Tail{}, &fetchError{err}
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			meta, err := msg.Metadata()
			if err != nil {
				return nil, Tail{}, apierr.Wrap(apierr.Internal, "reading conversation "+conversation, err)
			}
			if err := order.Check(meta); err != nil {
				return nil, Tail{}, err
			}
			if meta.Sequence.Stream > end.streamSeq {
				// Appended since the read began: the read ends where it began.
				return entries, tail, nil
			}
			var e model.ChatEntry
			if err := json.Unmarshal(msg.Data(), &e); err != nil {
				return nil, Tail{}, apierr.Newf(apierr.Internal, "conversation %s: entry at stream sequence %d is malformed", conversation, meta.Sequence.Stream)
			}
			entries = append(entries, e)
			tail = Tail{Seq: e.Seq, StreamSeq: meta.Sequence.Stream}
			if meta.Sequence.Stream == end.streamSeq {
				return entries, tail, nil
			}
		}
		if err := batch.Error(); err != nil {
			return nil, Tail{}, &fetchError{err}
		}
		if n == 0 {
			if ctx.Err() != nil {
				return nil, Tail{}, ctx.Err()
			}
			// A purge (Delete) while reading leaves nothing to reach.
			end2, err := l.last(ctx, conversation)
			if err != nil {
				return nil, Tail{}, err
			}
			if end2.streamSeq != end.streamSeq {
				return nil, Tail{}, apierr.Newf(apierr.Conflict, "conversation %s changed while it was read", conversation)
			}
			return nil, Tail{}, apierr.Newf(apierr.Network, "conversation %s: JetStream delivered nothing after %d of %d entries", conversation, len(entries), end.seq)
		}
	}
}

// List returns the conversations, the most recently active first.
func (l *Log) List(ctx context.Context) ([]model.ChatConversation, error) {
	info, err := l.stream.Info(ctx, jetstream.WithSubjectFilter(l.root+".>"))
	if err != nil {
		return nil, bus.JetStreamErr("listing conversations", err)
	}
	out := make([]model.ChatConversation, 0, len(info.State.Subjects))
	for subject, count := range info.State.Subjects {
		id, ok := strings.CutPrefix(subject, l.root+".")
		if !ok || !model.ValidConversationID(id) {
			continue
		}
		pos, err := l.last(ctx, id)
		if err != nil {
			return nil, err
		}
		if pos.seq == 0 {
			continue // deleted since
		}
		out = append(out, model.ChatConversation{Conversation: id, Entries: count, LastSeq: pos.seq, LastActivity: pos.at.UTC()})
	}
	slices.SortFunc(out, func(a, b model.ChatConversation) int {
		if c := b.LastActivity.Compare(a.LastActivity); c != 0 {
			return c
		}
		return strings.Compare(a.Conversation, b.Conversation)
	})
	return out, nil
}

// Delete removes every entry of conversation (NOT_FOUND when it has none).
func (l *Log) Delete(ctx context.Context, conversation string) error {
	if err := checkID(conversation); err != nil {
		return err
	}
	pos, err := l.last(ctx, conversation)
	if err != nil {
		return err
	}
	if pos.seq == 0 {
		return apierr.Newf(apierr.NotFound, "conversation %s not found", conversation)
	}
	if err := l.stream.Purge(ctx, jetstream.WithPurgeSubject(l.Subject(conversation))); err != nil {
		return bus.JetStreamErr("deleting conversation "+conversation, err)
	}
	return nil
}
