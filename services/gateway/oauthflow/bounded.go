package oauthflow

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// DefaultRequestTimeout bounds each request of a flow (Options.RequestTimeout):
// the protected resource's metadata, the authorization server's metadata,
// the client registration and the token exchange each answer a small
// document at once; an authorization server that accepts the connection
// and does not answer within 15 s (the probe's bound too) is not going to.
// Without it such a server held the start until the flow's 2 minutes ran
// out, reported as the user's timeout; with it discovery fails within
// 15 s a request. go-sdk's discovery makes up to five (three candidate
// resource metadata URLs, the server's metadata, the registration: 75 s),
// and the flow's own look for the issuer (registrar.go: discover) up to
// four more before it, so a server slow on each but just inside the bound
// can outlast the flow's 2 minutes, which then end the start.
const DefaultRequestTimeout = 15 * time.Second

// MsgNoAnswer is the failure of a flow one of whose requests timed out.
const MsgNoAnswer = "Authorization failed: the authorization server did not answer in time. Please try again."

// bounded is a copy of hc (nil: Go's default client) whose requests each
// end after d, their answer's body included, noting on noAnswer when that
// was what ended one.
func bounded(hc *http.Client, d time.Duration, noAnswer *atomic.Bool) *http.Client {
	c := http.Client{}
	if hc != nil {
		c = *hc
	}
	next := c.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	c.Transport = deadlined{next: next, d: d, noAnswer: noAnswer}
	return &c
}

// errNoAnswer is the cause of a request deadlined ended.
var errNoAnswer = errors.New("no answer within the request timeout")

// deadlined is bounded's RoundTripper. A deadline of the transport, not
// http.Client.Timeout: the client's timeout error reaches go-sdk, which
// turns discovery errors into text, and it alone could tell it.
type deadlined struct {
	next     http.RoundTripper
	d        time.Duration
	noAnswer *atomic.Bool
}

func (t deadlined) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithTimeoutCause(r.Context(), t.d, errNoAnswer)
	resp, err := t.next.RoundTrip(r.WithContext(ctx))
	if err != nil {
		t.note(ctx)
		cancel()
		return nil, err
	}
	resp.Body = &deadlinedBody{ReadCloser: resp.Body, ctx: ctx, cancel: cancel, t: t}
	return resp, nil
}

// note records a request that ran out of time.
func (t deadlined) note(ctx context.Context) {
	if errors.Is(context.Cause(ctx), errNoAnswer) {
		t.noAnswer.Store(true)
	}
}

// deadlinedBody is an answer's body under its request's deadline, which it
// releases when closed.
type deadlinedBody struct {
	io.ReadCloser
	ctx    context.Context
	cancel context.CancelFunc
	t      deadlined
}

func (b *deadlinedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.t.note(b.ctx)
	}
	return n, err
}

func (b *deadlinedBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}
