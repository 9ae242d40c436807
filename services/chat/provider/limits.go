package provider

import (
	"errors"
	"fmt"
	"io"
	"net/http"
)

// Bounds of what a provider may send: the model's output is not trusted
// (a prompt injection steers it, a server may misbehave), and a step is
// held in memory while it streams, then logged as one bus message.
const (
	// MaxReplyBytes bounds the text and tool call names and arguments of
	// one reply (a model's output limit is far below: 128k tokens are about
	// 512 KiB), so that its log entry fits the bus.
	MaxReplyBytes = 1 << 20
	// MaxToolCalls bounds the tool calls of one reply.
	MaxToolCalls = 128
	// DefaultMaxResponseBytes is Config.MaxResponseBytes' default: room for
	// a MaxReplyBytes answer streamed a token a chunk, in either API's
	// envelope.
	DefaultMaxResponseBytes = 64 << 20
)

// errTooLarge is a reply past MaxReplyBytes or MaxResponseBytes.
var errTooLarge = errors.New("the reply is too large")

// replyBudget counts a reply's output as it streams.
type replyBudget struct {
	bytes, calls int
}

// add counts n bytes of output; an error once the reply is past MaxReplyBytes.
func (b *replyBudget) add(n int) error {
	b.bytes += n
	if b.bytes > MaxReplyBytes {
		return fmt.Errorf("%w: more than %d bytes of text and tool call arguments in one step", errTooLarge, MaxReplyBytes)
	}
	return nil
}

// call counts a tool call; an error past MaxToolCalls.
func (b *replyBudget) call() error {
	b.calls++
	if b.calls > MaxToolCalls {
		return fmt.Errorf("%w: more than %d tool calls in one step", errTooLarge, MaxToolCalls)
	}
	return nil
}

// guarded is a copy of c that reads at most limit bytes of a response's body
// (one SSE line or event is buffered whole by the SDKs, and a stream may
// never end) and follows no redirect to another origin: the APIs never
// redirect, and Go forwards headers such as Anthropic's x-api-key to any
// host a redirect names (only Authorization and cookies are dropped), so a
// redirecting base URL would hand the key, and a request from inside the
// network, to whatever address it names.
func guarded(c *http.Client, limit int64) *http.Client {
	g := *c
	base := g.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	g.Transport = limitTransport{base: base, limit: limit}
	check := c.CheckRedirect
	g.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if first := via[0].URL; req.URL.Scheme != first.Scheme || req.URL.Host != first.Host {
			return fmt.Errorf("redirected from %s to another origin (%s://%s): not followed", first.Redacted(), req.URL.Scheme, req.URL.Host)
		}
		if check != nil {
			return check(req, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	return &g
}

// limitTransport cuts response bodies at limit bytes.
type limitTransport struct {
	base  http.RoundTripper
	limit int64
}

func (t limitTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if resp != nil && resp.Body != nil {
		resp.Body = &limitedBody{ReadCloser: resp.Body, left: t.limit, limit: t.limit}
	}
	return resp, err
}

// limitedBody fails a read past its limit (rather than ending the body
// quietly, which a decoder could take for its end).
type limitedBody struct {
	io.ReadCloser
	left, limit int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, fmt.Errorf("%w: the response is larger than %d bytes", errTooLarge, b.limit)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}
