package bus

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// RespondError answers req with the error contract: the JSON body plus the
// micro headers (Nats-Service-Error-Code holds the HTTP-style status, as micro
// clients expect a numeric code; the body holds the contract code).
//
// It sets the headers itself rather than through req.Error: our handlers
// answer on their own goroutines, and req.Error records the error in a field
// that micro reads, unsynchronised, once the handler function returns (a data
// race). The price is that micro's per-endpoint error counter stays at zero;
// errors are counted by our own events and logs.
func RespondError(req micro.Request, err error, opts ...micro.RespondOpt) error {
	e := apierr.From(err)
	h := micro.Headers{HeaderErrorCode: {strconv.Itoa(e.Code.HTTPStatus())}, HeaderError: {headerSafe(e.Message)}}
	return req.Respond(e.JSON(), append(opts, micro.WithHeaders(h))...)
}

// ErrorMsg builds the same error reply as a plain message, for responders that
// do not go through micro.
func ErrorMsg(err error) *nats.Msg {
	e := apierr.From(err)
	m := nats.NewMsg("")
	m.Header.Set(HeaderErrorCode, strconv.Itoa(e.Code.HTTPStatus()))
	m.Header.Set(HeaderError, headerSafe(e.Message))
	m.Data = e.JSON()
	return m
}

// ReplyError returns the error carried by a reply, or nil for a success reply.
func ReplyError(msg *nats.Msg) *apierr.Error {
	if msg == nil || msg.Header == nil {
		return nil
	}
	status := msg.Header.Get(HeaderErrorCode)
	if status == "" {
		return nil
	}
	if e, ok := apierr.Parse(msg.Data); ok {
		if msg.Header.Get(HeaderNotRun) == "true" {
			w := apierr.Wrap(e.Code, e.Message, ErrNotRun)
			w.Field = e.Field
			return w
		}
		return e
	}
	// A micro service that is not ours: keep what the headers say.
	code := apierr.Internal
	if n, err := strconv.Atoi(status); err == nil {
		code = apierr.CodeForStatus(n)
	}
	text := msg.Header.Get(HeaderError)
	if text == "" {
		text = "service error " + status
	}
	return apierr.New(code, text)
}

// ErrNotRun is the cause of an error reply marked HeaderNotRun: the call
// never reached its MCP server, so sending it again runs it at most once.
var ErrNotRun = errors.New("the call did not run")

// FromNATS maps nats.go errors of a request to the contract.
func FromNATS(err error, subject string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, nats.ErrNoResponders):
		return apierr.Wrap(apierr.ServiceUnavailable, "no service is answering "+subject, err)
	case errors.Is(err, nats.ErrTimeout), errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionDraining):
		return apierr.Wrap(apierr.Network, "request "+subject+": "+err.Error(), err)
	}
	return err
}

// headerSafe keeps a message on one header line.
func headerSafe(s string) string {
	if strings.ContainsAny(s, "\r\n") {
		s = strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
	}
	if len(s) > 1024 {
		s = s[:1024]
	}
	return s
}

// JetStreamErr maps a failed JetStream request about what to the error
// contract: no answer in time is NETWORK_ERROR, no JetStream at all
// SERVICE_UNAVAILABLE, a cancelled context passes through, the rest
// INTERNAL_ERROR.
func JetStreamErr(what string, err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout), errors.Is(err, jetstream.ErrNoStreamResponse):
		return apierr.Wrap(apierr.Network, what+": JetStream did not answer", err)
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, jetstream.ErrJetStreamNotEnabled):
		return apierr.Wrap(apierr.ServiceUnavailable, what+": JetStream is not available", err)
	case errors.Is(err, context.Canceled):
		return err
	}
	return apierr.Wrap(apierr.Internal, what, err)
}
