package gateway_test

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// sseLines reads an event stream's lines until it ends (a line with err).
func sseLines(br *bufio.Reader) <-chan sseLine {
	ch := make(chan sseLine, 100)
	go func() {
		for {
			s, err := br.ReadString('\n')
			ch <- sseLine{s, err}
			if err != nil {
				return
			}
		}
	}()
	return ch
}

type sseLine struct {
	s   string
	err error
}

// TestEventsResumeAcrossADrop: a client that has had no event yet when the
// gateway's NATS connection drops (the console waiting for an OAuth
// outcome) resumes from the id of the stream's first frame, and gets the
// event published meanwhile.
func TestEventsResumeAcrossADrop(t *testing.T) {
	e := runnertest.Start(t, quietRunner())
	h, cut := startGatewayCut(t, e, gateway.Options{EventHeartbeat: 300 * time.Millisecond})
	open := func(lastID string) (<-chan sseLine, func()) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		req, _ := http.NewRequestWithContext(ctx, "GET", h.url+"/api/v1/events?kinds=oauth", nil)
		req.Header.Set("Authorization", "Bearer "+h.admin)
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("events: %v %v", err, resp)
		}
		return sseLines(bufio.NewReader(resp.Body)), func() { cancel(); _ = resp.Body.Close() }
	}
	first, close1 := open("")
	defer close1()
	lastID := ""
	for lastID == "" {
		select {
		case l := <-first:
			if l.err != nil {
				t.Fatalf("the stream ended before its first frame: %v", l.err)
			}
			if id, ok := strings.CutPrefix(strings.TrimSpace(l.s), "id: "); ok {
				lastID = id
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no id in the stream's first frame")
		}
	}
	cut.Down()
	time.Sleep(300 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := e.JS.Publish(ctx, "mcp.v1.events.oauth.zz", []byte(`{"state":"authorized"}`)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	cut.Up()
	for ended := false; !ended; {
		select {
		case l := <-first:
			if strings.Contains(l.s, "authorized") {
				return // the stream survived the drop and delivered it
			}
			ended = l.err != nil
		case <-time.After(10 * time.Second):
			t.Fatal("the first stream neither ended nor delivered after the reconnect")
		}
	}
	second, close2 := open(lastID) // as the console resumes
	defer close2()
	for {
		select {
		case l := <-second:
			if l.err != nil {
				t.Fatalf("the resumed stream ended: %v", l.err)
			}
			if strings.Contains(l.s, "authorized") {
				return
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the event published while the gateway reconnected was never delivered")
		}
	}
}

// TestCallAcrossADrop: a call in flight when the gateway's NATS connection
// drops (its answer may come meanwhile and be lost) is answered at once
// with a 503 to retry, instead of waiting out the call timeout for a 504.
func TestCallAcrossADrop(t *testing.T) {
	e := runnertest.Start(t, quietRunner())
	opts := gateway.Options{}
	opts.MCP.CallTimeout = 20 * time.Second
	h, cut := startGatewayCut(t, e, opts)
	runServer(t, e, "alpha", nil)
	h.waitTool(h.admin, "alpha__sleep")
	type answer struct {
		r    reply
		took time.Duration
	}
	done := make(chan answer, 1)
	start := time.Now()
	go func() {
		r := h.do("POST", "/mcp/invoke", h.admin, map[string]any{"tool_name": "alpha__sleep", "params": map[string]any{"ms": 1000}})
		done <- answer{r, time.Since(start)}
	}()
	time.Sleep(300 * time.Millisecond)
	cut.Down()
	time.Sleep(1500 * time.Millisecond) // the runner answers at ~1 s, while the gateway is cut off
	cut.Up()
	a := <-done
	if a.took > 5*time.Second || a.r.status != http.StatusServiceUnavailable || a.r.header.Get("Retry-After") == "" ||
		!strings.Contains(string(a.r.body), "may or may not have run") {
		t.Fatalf("a call across a drop of the gateway's connection: %d after %s, Retry-After %q: %s", a.r.status, a.took.Round(time.Millisecond), a.r.header.Get("Retry-After"), a.r.body)
	}
}
