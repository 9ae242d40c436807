package mcpserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
	"github.com/mcpbus/mcpbus/services/gateway/mcpserver"
)

// openUnreadStream opens the GET stream of session sid with key over a raw
// connection that never reads what the gateway writes: a client whose
// socket buffers fill up.
func openUnreadStream(t *testing.T, base, key, sid string) net.Conn {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4 << 10) // fill up sooner
	}
	fmt.Fprintf(conn, "GET /mcp HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nAccept: text/event-stream\r\n"+
		"Mcp-Session-Id: %s\r\nMcp-Protocol-Version: 2025-11-25\r\n\r\n", u.Host, key, sid)
	// The status line only: the stream is open.
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReaderSize(conn, 16).ReadString('\n')
	if err != nil || !strings.Contains(line, " 200 ") {
		t.Fatalf("GET stream: %q %v", line, err)
	}
	_ = conn.SetReadDeadline(time.Time{})
	return conn
}

// A client that opens its session's GET stream and never reads it, while
// resource updates keep coming for it, stalls no other key's updates (they
// are passed on by one NATS callback for every session of the instance),
// and its stream is cut once a write has waited too long, rather than
// holding a goroutine and a connection for as long as the client likes.
func TestUnreadStreamStallsNoOtherKey(t *testing.T) {
	principals := map[string]*auth.Principal{
		"k-hostile": {KeyID: "k-hostile", Scopes: []string{auth.ScopeCall}},
		"k-victim":  {KeyID: "k-victim", Scopes: []string{auth.ScopeCall}},
	}
	e := start(t, mcpserver.Options{StreamWriteTimeout: 8 * time.Second}, keys(principals))
	e.addServer(t, "alpha", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	victim := connect(t, e.url, "k-victim", nil)
	if err := victim.Subscribe(ctx, &mcp.SubscribeParams{URI: greetingURI}); err != nil {
		t.Fatalf("victim subscribe: %v", err)
	}

	// The hostile session subscribes to a resource with a long URI (each
	// update is big) and opens its GET stream without reading it.
	mc := mcp.NewClient(&mcp.Implementation{Name: "hostile", Version: "1"}, nil)
	cs, err := mc.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: e.url, MaxRetries: -1, DisableStandaloneSSE: true,
		HTTPClient: &http.Client{Transport: bearer{"k-hostile", http.DefaultTransport}}},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatalf("hostile connect: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	// Distinct URIs: updates of one URI waiting together are written once.
	var originals []string
	for i := range 32 {
		original := fmt.Sprintf("test://big-%d-%s", i, strings.Repeat("a", 3800))
		if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "mcpbus://alpha/" + url.PathEscape(original)}); err != nil {
			t.Fatalf("hostile subscribe: %v", err)
		}
		originals = append(originals, original)
	}
	conn := openUnreadStream(t, e.url, "k-hostile", cs.ID())

	// The runner says the big resource changed, far more than the
	// connection's buffers hold, then that the victim's did.
	subj := bus.NewSubjects("").Event("resource_updated", "alpha")
	publish := func(uri string) {
		data, _ := json.Marshal(model.ResourceUpdatedEvent{Server: "alpha", URI: uri, At: time.Now()})
		if err := e.NC.Publish(subj, data); err != nil {
			t.Fatal(err)
		}
	}
	for range 60 { // 7 MiB, past what the connection's buffers hold
		for _, original := range originals {
			publish(original)
		}
	}
	if err := e.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // the updates are being written
	publish("test://greeting")
	start := time.Now()
	select {
	case got := <-victim.updated:
		if got != greetingURI {
			t.Fatalf("victim got resources/updated of %q", got)
		}
		t.Logf("the victim's update came after %v", time.Since(start))
	case <-time.After(6 * time.Second): // under the write timeout: a stalled write would hold it longer
		t.Fatalf("the victim's resources/updated is held up behind another key's unread stream")
	}

	// The unread stream was cut: the session's GET stream is free again
	// for the client to open (while a write to the old one hangs, go-sdk
	// holds the stream's lock and a new GET waits for it).
	// Updates keep coming meanwhile: without them a writer faster than the
	// publisher (no -race) had its updates coalesced into what the socket
	// buffers absorbed, never waited on a write, and kept the stream.
	_ = conn
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
		for _, original := range originals {
			publish(original)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer k-hostile")
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Mcp-Session-Id", cs.ID())
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			return false, fmt.Sprintf("the session's GET stream again: %v (the unread one still holds it)", err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, "the session's GET stream again: " + resp.Status + " (the unread one still holds it)"
	})
}
