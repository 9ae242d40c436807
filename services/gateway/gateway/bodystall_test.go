package gateway_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// A client that announces a body and sends less of it gets its answer and
// loses its connection within the body timeout, whether the request is
// refused before its body is read (no key, a foreign Host) or the read of
// the body gives up. Before, net/http read the rest of the unread body
// (to keep the connection) before it sent the answer, without a deadline:
// the client never got its 401, 403 or 400, and held the connection and a
// goroutine for as long as it liked.
func TestStalledBodyHoldsNoConnection(t *testing.T) {
	e := runnertest.Start(t, quietRunner())
	h := startGateway(t, e, gateway.Options{BodyTimeout: 2 * time.Second})
	host := strings.TrimPrefix(h.url, "http://")
	cases := []struct {
		name, head string
		status     int
		within     time.Duration
	}{
		{"no key", "POST /mcp/invoke HTTP/1.1\r\nHost: " + host + "\r\n", http.StatusUnauthorized, time.Second},
		{"foreign host", "POST /mcp HTTP/1.1\r\nHost: evil.example\r\nAuthorization: Bearer " + h.admin + "\r\n", http.StatusForbidden, time.Second},
		{"body read gives up", "POST /mcp/invoke HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Bearer " + h.admin + "\r\n", http.StatusBadRequest, 5 * time.Second},
	}
	type result struct {
		name   string
		status int
		took   time.Duration
		err    error
	}
	results := make(chan result, len(cases))
	for _, tc := range cases {
		go func() {
			began := time.Now()
			conn, err := net.Dial("tcp", host)
			if err != nil {
				results <- result{name: tc.name, err: err}
				return
			}
			defer conn.Close()
			// 100 bytes announced, 1 sent, and nothing more.
			fmt.Fprintf(conn, "%sContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{", tc.head)
			_ = conn.SetReadDeadline(time.Now().Add(15 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				results <- result{name: tc.name, took: time.Since(began), err: err}
				return
			}
			_ = resp.Body.Close()
			results <- result{name: tc.name, status: resp.StatusCode, took: time.Since(began)}
		}()
	}
	for range cases {
		r := <-results
		var want *struct {
			name, head string
			status     int
			within     time.Duration
		}
		for i := range cases {
			if cases[i].name == r.name {
				want = &cases[i]
			}
		}
		if r.err != nil {
			t.Errorf("%s: no answer after %s: %v", r.name, r.took.Round(time.Millisecond), r.err)
			continue
		}
		if r.status != want.status || r.took > want.within {
			t.Errorf("%s: %d after %s, want %d within %s", r.name, r.status, r.took.Round(time.Millisecond), want.status, want.within)
		}
		t.Logf("%s: %d after %s", r.name, r.status, r.took.Round(time.Millisecond))
	}
}
