package bus

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/deadline"
	"github.com/mcpbus/mcpbus/libs/principal"
)

// DefaultTimeout bounds a request whose context has no deadline.
const DefaultTimeout = 10 * time.Second

// Request sends msg and waits for its reply, bounded by ctx or else by
// timeout (DefaultTimeout when zero). It adds trace context, a request id and
// the caller's remaining time to the headers, and returns error replies and
// transport failures as *apierr.Error. Each request is a PRODUCER span
// ("send <subject template>") and a messaging.client.operation.duration sample.
func Request(ctx context.Context, nc *nats.Conn, msg *nats.Msg, timeout time.Duration) (*nats.Msg, error) {
	ctx, cancel := bounded(ctx, timeout)
	defer cancel()
	start := time.Now()
	ctx, span, tmpl, in := sendSpan(ctx, msg)
	reply, err := request(ctx, nc, msg)
	endSend(ctx, in, span, tmpl, start, err)
	return reply, err
}

func request(ctx context.Context, nc *nats.Conn, msg *nats.Msg) (*nats.Msg, error) {
	PrepareHeaders(ctx, msg)
	reply, err := nc.RequestMsgWithContext(ctx, msg)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, apierr.Wrap(apierr.Network, "no reply on "+msg.Subject+" before the deadline", err)
		}
		if errors.Is(err, nats.ErrMaxPayload) {
			// The client refuses it before sending: say what is too large
			// (it was INTERNAL_ERROR "nats: maximum payload exceeded").
			return nil, apierr.Wrap(apierr.Validation, fmt.Sprintf("the request (%d bytes, and its headers) is larger than the bus carries (max_payload %d bytes)",
				len(msg.Data), nc.MaxPayload()), err)
		}
		return nil, FromNATS(err, msg.Subject)
	}
	if e := ReplyError(reply); e != nil {
		return nil, e
	}
	return reply, nil
}

// PrepareHeaders fills the standard request headers of msg: trace context, a
// request id (kept if present), the remaining time of ctx and the principal
// ctx acts for (principal.With), which replaces any the message had.
func PrepareHeaders(ctx context.Context, msg *nats.Msg) {
	if msg.Header == nil {
		msg.Header = nats.Header{}
	}
	InjectTrace(ctx, msg.Header)
	if p, ok := principal.From(ctx); ok {
		principal.Set(msg.Header, p)
	}
	if msg.Header.Get(HeaderRequestID) == "" {
		msg.Header.Set(HeaderRequestID, uuid.NewString())
	}
	if left, ok := deadline.Left(ctx); ok {
		if ms := left.Milliseconds(); ms > 0 {
			msg.Header.Set(HeaderTimeout, strconv.FormatInt(ms, 10))
		}
	}
}

// RequestJSON marshals in, sends it to subject and decodes the reply into out
// (out may be nil).
func RequestJSON(ctx context.Context, nc *nats.Conn, subject string, in, out any, timeout time.Duration) error {
	data := []byte("{}")
	if in != nil {
		var err error
		if data, err = json.Marshal(in); err != nil {
			return apierr.Wrap(apierr.Validation, "encoding request: "+err.Error(), err)
		}
	}
	msg := nats.NewMsg(subject)
	msg.Data = data
	reply, err := Request(ctx, nc, msg, timeout)
	if err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(reply.Data, out); err != nil {
		return apierr.Wrap(apierr.Internal, "decoding reply of "+subject+": "+err.Error(), err)
	}
	return nil
}

// CallerTimeout reads the caller's remaining time from h (0 when absent or bad).
func CallerTimeout(h nats.Header) time.Duration {
	v := h.Get(HeaderTimeout)
	if v == "" {
		return 0
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 {
		return 0
	}
	if ms > math.MaxInt64/int64(time.Millisecond) {
		return time.Duration(math.MaxInt64) // would overflow: as good as no limit
	}
	return time.Duration(ms) * time.Millisecond
}

// ReplyWithin is how long a handler may work on a request whose header is
// h: limit, or less when the caller gives up sooner, so that its answer
// arrives a second before (half the caller's time if it has under two
// seconds). A handler that retries through an election then reports its
// failure rather than the caller seeing no reply, with the work perhaps
// done after.
func ReplyWithin(h nats.Header, limit time.Duration) time.Duration {
	if ct := CallerTimeout(h); ct > 0 && ct-time.Second < limit {
		return max(ct-time.Second, ct/2)
	}
	return limit
}

// AnswersToken marks the part of an identity's inbox that the parties it
// asks may publish to: `_I.<name>.answers.<id>`. An agent answering a
// server's elicitation writes there, and nowhere else of the runner's inbox
// (its JetStream acks, the replies of services).
const AnswersToken = "answers"

// RequestAnswer is Request with the reply awaited on a subject of its own,
// `<nc's inbox prefix>.answers.<id>`, for requests answered by identities
// that may publish nothing else into nc's inbox. Those may publish to any
// identity's answers subjects, so the id is 128 random bits: a nuid (a
// fixed prefix and a counter) would let one agent guess, and answer,
// another caller's elicitation.
func RequestAnswer(ctx context.Context, nc *nats.Conn, msg *nats.Msg, timeout time.Duration) (*nats.Msg, error) {
	ctx, cancel := bounded(ctx, timeout)
	defer cancel()
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, apierr.Wrap(apierr.Internal, "no randomness for an answer subject", err)
	}
	prefix := cmp.Or(nc.Opts.InboxPrefix, nats.InboxPrefix[:len(nats.InboxPrefix)-1])
	inbox := prefix + "." + AnswersToken + "." + hex.EncodeToString(id[:])
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, apierr.Wrap(apierr.Network, "subscribing for the answer", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	start := time.Now()
	ctx, span, tmpl, in := sendSpan(ctx, msg)
	reply, err := awaitAnswer(ctx, nc, sub, msg, inbox)
	endSend(ctx, in, span, tmpl, start, err)
	return reply, err
}

func awaitAnswer(ctx context.Context, nc *nats.Conn, sub *nats.Subscription, msg *nats.Msg, inbox string) (*nats.Msg, error) {
	PrepareHeaders(ctx, msg)
	msg.Reply = inbox
	if err := nc.PublishMsg(msg); err != nil {
		return nil, FromNATS(err, msg.Subject)
	}
	reply, err := sub.NextMsgWithContext(ctx)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return nil, apierr.Wrap(apierr.Network, "no answer on "+msg.Subject+" before the deadline", err)
	case err != nil:
		return nil, FromNATS(err, msg.Subject)
	case len(reply.Data) == 0 && reply.Header.Get("Status") == "503":
		return nil, FromNATS(nats.ErrNoResponders, msg.Subject)
	}
	if e := ReplyError(reply); e != nil {
		return nil, e
	}
	return reply, nil
}

// bounded is ctx, or ctx bounded by timeout (DefaultTimeout when zero) when
// it has no deadline of its own, nor a limit that a person's answer pauses
// (libs/deadline).
func bounded(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := deadline.Left(ctx); ok {
		return ctx, func() {}
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return context.WithTimeout(ctx, timeout)
}
