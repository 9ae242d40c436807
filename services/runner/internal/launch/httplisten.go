package launch

import (
	"context"
	"mime"
	"net/http"
	"time"
)

// startListening starts listen, once.
func (c *HTTPConn) startListening() { c.listenOnceStart.Do(func() { go c.listen() }) }

// listen keeps the standalone SSE stream open, as go-sdk does after the
// handshake of a session before protocol 2026-07-28: go-sdk opens it from a
// hook of its own connection that a wrapped connection (this one, and the
// runner's tracedConn) hides from it. The server's requests and
// notifications outside calls (tools/list_changed) come on it; they go to
// go-sdk. It ends when the connection closes, or when the server offers no
// stream (405, another 4xx: go-sdk gives up on those too); otherwise it
// connects again after a pause that grows to 30 s.
func (c *HTTPConn) listen() {
	delay := time.Second
	for c.listenOnce() {
		select {
		case <-c.closed:
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, 30*time.Second)
	}
}

// listenOnce reads the standalone stream once, to its end; false when it
// should not be opened again.
func (c *HTTPConn) listenOnce() bool {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-c.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return false
	}
	req.Header["Accept"] = []string{"text/event-stream"}
	if v := c.version.Load(); v != nil {
		req.Header["Mcp-Protocol-Version"] = []string{*v}
	}
	if sid := c.SessionID(); sid != "" {
		req.Header["Mcp-Session-Id"] = []string{sid}
	}
	if err := c.authorize(req); err != nil {
		return ctx.Err() == nil
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return ctx.Err() == nil
	}
	defer func() { _ = resp.Body.Close() }()
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch {
	case resp.StatusCode >= 400 && resp.StatusCode < 500, resp.StatusCode == http.StatusOK && ct != "text/event-stream":
		return false
	case resp.StatusCode != http.StatusOK:
		return true
	}
	_, _ = c.readEvents(ctx, resp.Body, 0) // raw ids start at 1: every message goes to go-sdk
	return ctx.Err() == nil
}
