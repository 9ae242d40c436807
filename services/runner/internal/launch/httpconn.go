package launch

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// HTTPTransport is go-sdk's Streamable HTTP client transport with raw tool
// calls over the same session (HTTPConn.CallTool): go-sdk keeps the session
// (handshake, its own requests, the standalone stream, session expiry),
// while the runner POSTs plain tools/call requests with the session's
// headers and passes the result on as the bytes the server wrote.
type HTTPTransport struct {
	*mcp.StreamableClientTransport

	conn atomic.Pointer[HTTPConn]
	// version is the agreed protocol version (SetProtocolVersion), which
	// Prepare's HTTP client also puts on go-sdk's requests.
	version atomic.Pointer[string]
}

// Connect connects go-sdk's transport and wraps its connection.
func (t *HTTPTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	inner, err := t.StreamableClientTransport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	client := t.HTTPClient
	if client == nil {
		client = http.DefaultClient
	}
	c := &HTTPConn{
		Connection: inner, client: client, url: t.Endpoint, auth: t.OAuthHandler,
		maxEvent: orDefaultInt(t.MaxEventSize, mcp.DefaultMaxEventSize),
		incoming: make(chan msgOrErr), injected: make(chan msgOrErr), closed: make(chan struct{}),
		version: &t.version,
	}
	go c.pump()
	t.conn.Store(c)
	return c, nil
}

// Conn is the connection Connect made, nil before.
func (t *HTTPTransport) Conn() *HTTPConn { return t.conn.Load() }

// ErrUseSession says a raw call was not made and must go through go-sdk's
// session instead: the server no longer knows the session (404), which
// go-sdk's connection then learns and reports as it always has, or the
// OAuth handler authorized again after a 401 or 403 (go-sdk retries then).
var ErrUseSession = errors.New("the call must go through go-sdk's session")

// HTTPConn is go-sdk's Streamable HTTP connection with raw tool calls
// beside it. Messages other than a raw call's response that arrive on a raw
// call's SSE stream (the server's requests and notifications) are handed to
// go-sdk's Read, as if they had come on one of its own streams.
type HTTPConn struct {
	mcp.Connection

	client   *http.Client // go-sdk's: the configured headers are added by its transport
	url      string
	auth     auth.OAuthHandler
	maxEvent int

	incoming  chan msgOrErr // from go-sdk's connection (pump)
	injected  chan msgOrErr // from raw calls' streams
	closed    chan struct{}
	closeOnce sync.Once
	progress  progressCount

	nextID  atomic.Uint64
	version *atomic.Pointer[string] // shared with the HTTP client's headerTransport
	reqMeta requestMeta

	listenOnceStart sync.Once
}

// sep2575Version is the first protocol version whose requests carry the
// _meta triple and name their method (and tool) in headers.
const sep2575Version = "2026-07-28"

// SetProtocolVersion records the version the handshake agreed on, which
// raw calls send in the MCP-Protocol-Version header, and go-sdk's requests
// too (go-sdk would, from the hook a wrapped connection hides from it).
func (c *HTTPConn) SetProtocolVersion(v string) { c.version.Store(&v) }

// HasRequestMeta reports whether raw calls can carry the SEP-2575 _meta of
// the session (captured from a request go-sdk sent after the handshake).
func (c *HTTPConn) HasRequestMeta() bool { return c.reqMeta.HasRequestMeta() }

// Write sends one of go-sdk's messages, keeping the SEP-2575 _meta of its
// requests for raw calls.
func (c *HTTPConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	c.reqMeta.observe(msg)
	return c.Connection.Write(ctx, msg)
}

// pump reads go-sdk's connection for Read, until it fails or closes.
func (c *HTTPConn) pump() {
	for {
		msg, err := c.Connection.Read(context.Background())
		select {
		case c.incoming <- msgOrErr{msg, err}:
		case <-c.closed:
			return
		}
		if err != nil {
			return
		}
	}
}

// Read returns the next message for go-sdk, from its connection or from a
// raw call's stream.
func (c *HTTPConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case v := <-c.incoming:
		c.progress.note(v.msg)
		return v.msg, v.err
	case v := <-c.injected:
		c.progress.note(v.msg)
		return v.msg, v.err
	case <-c.closed:
		return nil, io.EOF
	}
}

// Close closes go-sdk's connection (which ends its session on the server).
func (c *HTTPConn) Close() error {
	err := c.Connection.Close()
	c.closeOnce.Do(func() { close(c.closed) })
	return err
}

// CallTool makes a raw tools/call as StdioConn.CallTool does, as one POST
// with the session's id, protocol version and authorization (and, under
// protocol 2026-07-28, the _meta triple and the method and name headers). A 401 or 403
// is answered by the OAuth handler as go-sdk's would be (its error is
// returned); a 404 on the session returns ErrUseSession without calling.
func (c *HTTPConn) CallTool(ctx context.Context, name string, args json.RawMessage, meta []byte) (json.RawMessage, RawID, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	n := c.nextID.Add(1)
	id := RawID(n)
	body, err := appendToolCall(nil, n, name, args, c.reqMeta.p.Load(), meta)
	if err != nil {
		return nil, id, err
	}
	req, err := c.newRequest(ctx, body)
	if err != nil {
		return nil, id, fmt.Errorf("calling \"tools/call\": %w", err)
	}
	if v := c.version.Load(); v != nil && *v >= sep2575Version {
		// The standard headers of SEP-2243, as go-sdk sets them. Tools that
		// bind arguments to headers (x-mcp-header) are not called raw.
		req.Header["Mcp-Method"] = []string{"tools/call"}
		req.Header.Set("Mcp-Name", name)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			go c.notifyCancelled(n, ctx.Err())
			return nil, id, ctx.Err()
		}
		return nil, id, fmt.Errorf("calling \"tools/call\": %w", err)
	}
	defer closeBody(resp.Body)
	if err := c.checkStatus(ctx, req, resp); err != nil {
		return nil, id, err
	}
	var result []byte
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch ct {
	case "application/json":
		result, err = c.readJSON(resp.Body, n)
	case "text/event-stream":
		result, err = c.readEvents(ctx, resp.Body, n)
	default:
		err = fmt.Errorf("unsupported content type %q", ct)
	}
	if err != nil {
		if ctx.Err() != nil {
			go c.notifyCancelled(n, ctx.Err())
			return nil, id, ctx.Err()
		}
		return nil, id, fmt.Errorf("calling \"tools/call\": %w", err)
	}
	return result, id, nil
}

// drainWait bounds how long a finished call waits for the rest of its
// response body (the end of an SSE stream, normally at once): read to its
// end, the connection is reused; a server that keeps the stream open past
// the response must not hold the call's reply.
const drainWait = 50 * time.Millisecond

func closeBody(body io.ReadCloser) {
	t := time.AfterFunc(drainWait, func() { _ = body.Close() })
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 64<<10))
	t.Stop()
	_ = body.Close()
}

// newRequest is a POST of body with the headers go-sdk's connection would
// put on it (the configured ones come from the HTTP client's transport).
func (c *HTTPConn) newRequest(ctx context.Context, body []byte) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header["Content-Type"] = []string{"application/json"}
	req.Header["Accept"] = []string{"application/json, text/event-stream"}
	if v := c.version.Load(); v != nil {
		req.Header["Mcp-Protocol-Version"] = []string{*v}
	}
	if sid := c.SessionID(); sid != "" {
		req.Header["Mcp-Session-Id"] = []string{sid}
	}
	return req, c.authorize(req)
}

// authorize puts the OAuth handler's token on req, as go-sdk does for its
// requests: from the same token source (it caches the token and renews
// it), and without one when the token endpoint refuses the grant.
func (c *HTTPConn) authorize(req *http.Request) error {
	if c.auth == nil {
		return nil
	}
	ts, err := c.auth.TokenSource(req.Context())
	if err != nil || ts == nil {
		return err
	}
	tok, err := ts.Token()
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) && re.ErrorCode == "invalid_grant" {
			return nil
		}
		return err
	}
	if tok != nil {
		req.Header.Set("Authorization", "Bearer "+tok.AccessToken)
	}
	return nil
}

// checkStatus turns a response that is not a success into the call's error.
func (c *HTTPConn) checkStatus(ctx context.Context, req *http.Request, resp *http.Response) error {
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		return nil
	case (code == http.StatusUnauthorized || code == http.StatusForbidden) && c.auth != nil:
		if err := c.auth.Authorize(ctx, req, resp); err != nil {
			return fmt.Errorf("calling \"tools/call\": %w", err)
		}
		return ErrUseSession // authorized again: go-sdk's session makes the call
	case code == http.StatusNotFound && c.SessionID() != "":
		return ErrUseSession
	case code == http.StatusTooManyRequests:
		return upstreamRateLimited(resp.Header.Get("Retry-After"))
	default:
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if msg, err := jsonrpc.DecodeMessage(data); err == nil {
			if r, ok := msg.(*jsonrpc.Response); ok && r.Error != nil {
				return fmt.Errorf("calling \"tools/call\": %w", r.Error)
			}
		}
		return fmt.Errorf("calling \"tools/call\": %s", http.StatusText(code))
	}
}

// upstreamRateLimited is the call's error when the upstream answers 429:
// RATE_LIMITED (the caller may retry later), with its Retry-After in
// seconds when it gave one, not a failure of the server.
func upstreamRateLimited(retryAfter string) error {
	msg := "the server's upstream is rate limiting calls (HTTP 429)"
	if secs, ok := retryAfterSeconds(retryAfter, time.Now()); ok {
		msg += fmt.Sprintf("; retry in %d s", secs)
	}
	return apierr.New(apierr.RateLimited, msg)
}

// retryAfterSeconds reads a Retry-After header, in seconds or as an HTTP
// date; a value past a day or in the past says nothing worth passing on.
func retryAfterSeconds(v string, now time.Time) (int, bool) {
	v = strings.TrimSpace(v)
	secs, err := strconv.Atoi(v)
	if err != nil {
		at, derr := http.ParseTime(v)
		if derr != nil {
			return 0, false
		}
		secs = int(math.Ceil(at.Sub(now).Seconds()))
	}
	return secs, secs >= 0 && secs <= 86400
}

// readJSON reads a response of one JSON-RPC message, which must answer raw call n.
func (c *HTTPConn) readJSON(body io.Reader, n uint64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(body, int64(c.maxEvent)+1))
	if err != nil {
		return nil, err
	}
	if len(data) > c.maxEvent {
		return nil, fmt.Errorf("the response is over the limit of %d bytes", c.maxEvent)
	}
	m := scanMessage(data)
	if !m.ours || m.n != n {
		return nil, errors.New("the server answered with another message")
	}
	r := m.reply()
	return r.result, r.err
}

// readEvents reads an SSE stream until the response to raw call n; other
// messages on it go to go-sdk.
func (c *HTTPConn) readEvents(ctx context.Context, body io.Reader, n uint64) ([]byte, error) {
	br := bufio.NewReaderSize(body, 16<<10)
	var long, data []byte
	event := false // a data field was seen since the last dispatch
	name := ""
	for {
		line, err := readLine(br, &long, c.maxEvent)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, errors.New("request terminated without response")
			}
			return nil, err
		}
		line = bytes.TrimRight(line, "\r\n")
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch {
		case len(line) == 0: // the end of an event
			if event && (name == "" || name == "message") && len(data) > 0 {
				if res, done, err := c.dispatch(ctx, data, n); done {
					return res, err
				}
			}
			data, event, name = data[:0], false, ""
		case string(field) == "data":
			if event {
				data = append(data, '\n')
			}
			data = append(data, value...)
			event = true
			if len(data) > c.maxEvent {
				return nil, fmt.Errorf("an event is over the limit of %d bytes", c.maxEvent)
			}
		case string(field) == "event":
			name = string(value)
		}
	}
}

// dispatch handles one event's message: the response to raw call n ends the
// stream (done); anything else goes to go-sdk.
func (c *HTTPConn) dispatch(ctx context.Context, data []byte, n uint64) ([]byte, bool, error) {
	if m := scanMessage(data); m.ours && m.n == n {
		r := m.reply() // the result is in data, which the caller gives up on returning it
		return r.result, true, r.err
	}
	msg, err := jsonrpc.DecodeMessage(data)
	if err != nil {
		return nil, true, fmt.Errorf("the server sent an unreadable message: %v", err)
	}
	select {
	case c.injected <- msgOrErr{msg: msg}:
		return nil, false, nil
	case <-c.closed:
		return nil, true, fmt.Errorf("%w: the connection to the server was closed", mcp.ErrConnectionClosed)
	case <-ctx.Done():
		return nil, true, ctx.Err()
	}
}

// cancelTimeout bounds the notification that tells the server a raw call was given up.
const cancelTimeout = 5 * time.Second

// notifyCancelled tells the server a raw call was given up, as go-sdk does
// for its calls, off the caller's path.
func (c *HTTPConn) notifyCancelled(n uint64, reason error) {
	ctx, cancel := context.WithTimeout(context.Background(), cancelTimeout)
	defer cancel()
	req, err := c.newRequest(ctx, appendCancelled(nil, n, reason))
	if err != nil {
		return
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return
	}
	closeBody(resp.Body)
}
