package gateway_test

import (
	"bufio"
	"context"
	"fmt"
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

// mcpPost sends one JSON-RPC message to /mcp with the session's headers.
func (h *gw) mcpPost(t *testing.T, sid, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.url+"/mcp", strings.NewReader(body))
	for k, v := range map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream", "Authorization": "Bearer " + h.admin} {
		req.Header.Set(k, v)
	}
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
	return resp, b.String()
}

// TestTaskEndPushedAcrossADrop: a 2025-11-25 session's task that ends
// while the gateway's NATS connection is down (its event reaches no one)
// still gets its notifications/tasks/status once the connection is back.
func TestTaskEndPushedAcrossADrop(t *testing.T) {
	e := runnertest.Start(t, quietRunner())
	h, cut := startGatewayCut(t, e, gateway.Options{})
	runServer(t, e, "alpha", nil)
	h.waitTool(h.admin, "alpha__sleep")
	resp, _ := h.mcpPost(t, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	sid := resp.Header.Get("Mcp-Session-Id")
	if sid == "" {
		t.Fatalf("initialize: %d", resp.StatusCode)
	}
	h.mcpPost(t, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, h.url+"/mcp", nil)
	for k, v := range map[string]string{"Accept": "text/event-stream", "Authorization": "Bearer " + h.admin, "Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-11-25"} {
		req.Header.Set(k, v)
	}
	stream, err := http.DefaultClient.Do(req)
	if err != nil || stream.StatusCode != http.StatusOK {
		t.Fatalf("GET stream: %v %v", stream, err)
	}
	defer stream.Body.Close()
	lines := sseLines(bufio.NewReader(stream.Body))
	_, body := h.mcpPost(t, sid, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"alpha__sleep","arguments":{"ms":1000},"task":{}}}`)
	_, rest, ok := strings.Cut(body, `"taskId":"`)
	id, _, _ := strings.Cut(rest, `"`)
	if !ok || id == "" {
		t.Fatalf("the call made no task: %s", body)
	}
	cut.Down()
	time.Sleep(2 * time.Second) // the task ends meanwhile
	cut.Up()
	for end := time.After(15 * time.Second); ; {
		select {
		case l := <-lines:
			if l.err != nil {
				t.Fatalf("the session's stream ended: %v", l.err)
			}
			if strings.Contains(l.s, "notifications/tasks/status") && strings.Contains(l.s, id) {
				return
			}
		case <-end:
			t.Fatal("no notifications/tasks/status for a task that ended while the gateway was cut off")
		}
	}
}

// TestReplyLostAcrossADrop: a call whose reply comes while the gateway's
// NATS connection is down ends once the connection is back, saying the call
// ran and its reply was lost, instead of waiting out its timeout and saying
// the tool did not answer; a call that ends after the connection is back
// gets its reply as usual.
func TestReplyLostAcrossADrop(t *testing.T) {
	e := runnertest.Start(t, quietRunner())
	h, cut := startGatewayCut(t, e, gateway.Options{CallTimeout: 25 * time.Second})
	runServer(t, e, "alpha", nil)
	h.waitTool(h.admin, "alpha__sleep")
	type answer struct {
		r    reply
		took time.Duration
	}
	call := func(ms int) <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			start := time.Now()
			r := h.do("POST", "/mcp/invoke", h.admin, fmt.Sprintf(`{"tool_name":"alpha__sleep","params":{"ms":%d}}`, ms))
			ch <- answer{r, time.Since(start)}
		}()
		return ch
	}
	resp, _ := h.mcpPost(t, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	sid := resp.Header.Get("Mcp-Session-Id")
	if sid == "" {
		t.Fatalf("initialize: %d", resp.StatusCode)
	}
	h.mcpPost(t, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	session := make(chan string, 1)
	go func() {
		_, body := h.mcpPost(t, sid, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"alpha__sleep","arguments":{"ms":800}}}`)
		session <- body
	}()
	lost, kept := call(800), call(4000)
	time.Sleep(300 * time.Millisecond)
	cut.Down()
	time.Sleep(1500 * time.Millisecond) // the first call's reply is published meanwhile
	up := time.Now()
	cut.Up()
	select {
	case a := <-lost:
		if a.r.status != http.StatusGatewayTimeout || !strings.Contains(string(a.r.body), "reply was lost") ||
			!strings.Contains(string(a.r.body), "succeeded") {
			t.Fatalf("the call whose reply was lost: %d %s", a.r.status, a.r.body)
		}
		t.Logf("the lost reply's call ended %v after the connection came back", time.Since(up))
	case <-time.After(10 * time.Second):
		t.Fatal("the call whose reply was lost still waits 10 s after the connection came back")
	}
	select {
	case body := <-session:
		if !strings.Contains(body, `"isError":true`) || !strings.Contains(body, "reply was lost") {
			t.Fatalf("the session's call whose reply was lost: %s", body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the session's call whose reply was lost still waits")
	}
	select {
	case a := <-kept:
		if a.r.status != http.StatusOK {
			t.Fatalf("the call that ended after the drop: %d %s", a.r.status, a.r.body)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the call that ended after the drop got no reply")
	}
}
