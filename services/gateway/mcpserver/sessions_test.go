package mcpserver_test

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/gateway/mcpserver"
)

// rawSession initializes a session by hand: no GET stream is ever opened.
func rawSession(t *testing.T, url string) string {
	t.Helper()
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
	r := rawWith(t, url, "", "", init, map[string]string{"Mcp-Protocol-Version": ""})
	if r.session == "" {
		t.Fatalf("initialize gave no session id: %d %s", r.status, r.body)
	}
	if r := raw(t, url, "", r.session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); r.status != http.StatusAccepted {
		t.Fatalf("initialized: %d %s", r.status, r.body)
	}
	return r.session
}

// A session that never opened the GET stream is closed after a sixth of the
// session timeout idle; one with a stream keeps the whole timeout.
func TestStreamlessSessionsCloseSooner(t *testing.T) {
	e := start(t, mcpserver.Options{NoAuth: true, SessionTimeout: 3 * time.Second}, nil)
	e.addServer(t, "alpha", nil)
	c := connect(t, e.url, "", nil) // go-sdk's client opens the GET stream
	sid := rawSession(t, e.url)
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"alpha__echo","arguments":{"message":"x"}}}`
	// Both idle from here (c used last: the time rawSession took on a
	// loaded host does not count against it), then c asked first.
	if st, _, body := rawPost(t, e.url, c.ID(), call, nil); st != http.StatusOK {
		t.Fatalf("a session with a stream: %d %s", st, body)
	}
	time.Sleep(1500 * time.Millisecond) // > 3s/6, < 3s
	if st, _, body := rawPost(t, e.url, c.ID(), call, nil); st != http.StatusOK {
		t.Fatalf("a session with a stream idle for 1.5 s was closed: %d %s", st, body)
	}
	if st, _, body := rawPost(t, e.url, sid, call, nil); st != http.StatusNotFound {
		t.Fatalf("a session without a stream idle for 1.5 s still answers: %d %s", st, body)
	}
}

// A catalog change notifies every session; sessions without a stream cannot
// take it, which go-sdk reports per session: that is Debug, not one WARN per
// session and change.
func TestCatalogChangeLogsNoWarnPerSession(t *testing.T) {
	logs := &testkit.LogBuffer{}
	e := start(t, mcpserver.Options{NoAuth: true, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}, nil)
	e.addServer(t, "alpha", nil)
	for range 3 {
		rawSession(t, e.url)
	}
	e.addServer(t, "beta", nil)
	e.addServer(t, "gamma", nil)
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
		return strings.Count(logs.String(), "stream not connected or already closed") >= 3, logs.String()
	})
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "stream not connected or already closed") && !strings.Contains(line, "level=DEBUG") {
			t.Fatalf("a session without a stream logged above Debug: %s", line)
		}
	}
}

// One principal's sessions are bounded: opening one more closes their
// least recently used one (the others go on).
func TestSessionsPerPrincipalBounded(t *testing.T) {
	e := start(t, mcpserver.Options{NoAuth: true, MaxSessions: 3}, nil)
	e.addServer(t, "alpha", nil)
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"alpha__echo","arguments":{"message":"x"}}}`
	var sids []string
	for range 3 {
		sids = append(sids, rawSession(t, e.url))
		time.Sleep(10 * time.Millisecond) // distinct last uses
	}
	if st, _, body := rawPost(t, e.url, sids[0], call, nil); st != http.StatusOK { // sids[1] is now the least recently used
		t.Fatalf("a session within the bound: %d %s", st, body)
	}
	sids = append(sids, rawSession(t, e.url))
	for i, want := range []int{http.StatusOK, http.StatusNotFound, http.StatusOK, http.StatusOK} {
		if st, _, body := rawPost(t, e.url, sids[i], call, nil); st != want {
			t.Fatalf("session %d after the fourth opened: %d %s, want %d", i, st, body, want)
		}
	}
}

// A session whose client listens on its GET stream (for resource updates,
// list changes) is not idle however long it makes no request; once the
// stream ends, the session timeout runs from then. Before, it was closed
// after the session timeout without a request, its stream open.
func TestListeningSessionIsNotIdle(t *testing.T) {
	e := start(t, mcpserver.Options{NoAuth: true, SessionTimeout: 2 * time.Second}, nil)
	e.addServer(t, "alpha", nil)
	c := connect(t, e.url, "", nil) // go-sdk's client keeps the GET stream open
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"alpha__echo","arguments":{"message":"x"}}}`
	time.Sleep(3 * time.Second) // > the session timeout, no request
	if st, _, body := rawPost(t, e.url, c.ID(), call, nil); st != http.StatusOK {
		t.Fatalf("a listening session without a request for 3 s (timeout 2 s) was closed: %d %s", st, body)
	}
}

// A JSON-RPC batch (a body that is an array: MCP before 2025-06-18 allowed
// them) is refused. The gateway's checks read one message a POST (the
// sessions cap on initialize, the listen streams' cap, the fast path's
// filters); go-sdk still serves batches of older protocol versions, so an
// initialize inside one opened sessions past the key's cap.
func TestBatchesRefused(t *testing.T) {
	e := start(t, mcpserver.Options{NoAuth: true, MaxSessions: 2}, nil)
	e.addServer(t, "alpha", nil)
	init := `[{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}]`
	for i := range 4 {
		r := rawWith(t, e.url, "", "", init, map[string]string{"Mcp-Protocol-Version": ""})
		if r.session != "" || r.status != http.StatusBadRequest || !strings.Contains(r.body, "batch") {
			t.Fatalf("batch %d: %d session %q %s, want 400 naming batches", i+1, r.status, r.session, r.body)
		}
	}
	// One message a POST is served as before.
	rawSession(t, e.url)
}

// Every event stream of /mcp tells proxies not to buffer it
// (X-Accel-Buffering: no, which the 2026-07-28 transport asks of servers):
// a buffered stream holds back a call's progress and a session's
// notifications. So the answers go-sdk streams, of both eras, and a
// session's GET stream.
func TestEventStreamsUnbuffered(t *testing.T) {
	e := start(t, mcpserver.Options{NoAuth: true}, nil)
	e.addServer(t, "alpha", nil)
	sid := rawSession(t, e.url)
	for what, r := range map[string]rawResp{
		"tools/list of a session": raw(t, e.url, "", sid, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`),
		"a session's call with progress": raw(t, e.url, "", sid,
			`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"alpha__echo","arguments":{"message":"x"},"_meta":{"progressToken":"p"}}}`),
		"tools/list of 2026-07-28": rawWith(t, e.url, "", "", modernBody(4, "tools/list", ""), modernHeaders("tools/list", "")),
	} {
		if r.ctype != "text/event-stream" || r.header.Get("X-Accel-Buffering") != "no" {
			t.Errorf("%s: %s, X-Accel-Buffering %q", what, r.ctype, r.header.Get("X-Accel-Buffering"))
		}
	}
	req, _ := http.NewRequest(http.MethodGet, e.url, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	req.Header.Set("Mcp-Session-Id", sid)
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Accel-Buffering") != "no" {
		t.Errorf("the GET stream: %d, X-Accel-Buffering %q", resp.StatusCode, resp.Header.Get("X-Accel-Buffering"))
	}
}
