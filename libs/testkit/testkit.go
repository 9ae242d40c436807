// Package testkit holds small helpers the tests of several modules share: an
// embedded NATS server per test, a log sink services write to from many
// goroutines, and a secret finder for captured bus messages.
package testkit

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/nats-io/nats.go"
)

// LogBuffer collects log lines written concurrently (a slog handler's writer).
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is everything written so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Tail is the last n bytes written.
func (b *LogBuffer) Tail(n int) string {
	return Tail(b.String(), n)
}

// Tail keeps the last n bytes of s.
func Tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// TailLines keeps the last n lines of s, without its final newline.
func TailLines(s string, n int) string {
	s = strings.TrimRight(s, "\n")
	if n <= 0 {
		return ""
	}
	i := len(s)
	for range n {
		if i = strings.LastIndexByte(s[:i], '\n'); i < 0 {
			return s
		}
	}
	return s[i+1:]
}

// MsgContains reports whether s appears in a message's subject, header names
// or values, or body.
func MsgContains(m *nats.Msg, s string) bool {
	if strings.Contains(m.Subject, s) || bytes.Contains(m.Data, []byte(s)) {
		return true
	}
	for k, vs := range m.Header {
		if strings.Contains(k, s) {
			return true
		}
		for _, v := range vs {
			if strings.Contains(v, s) {
				return true
			}
		}
	}
	return false
}

// NATS starts an embedded NATS server for t (JetStream in a temporary
// directory, a free TCP port) and stops it when t ends.
func NATS(t testing.TB) *embednats.Server {
	t.Helper()
	ns, err := embednats.Start(embednats.Options{Port: -1, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	return ns
}

// Connect opens an in-process connection to ns, closed when t ends.
func Connect(t testing.TB, ns *embednats.Server) *nats.Conn {
	t.Helper()
	nc, err := ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}
