package mcpserver

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// delivered waits until s's goroutine has written what it was given.
func delivered(t *testing.T, s *sessionPush) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		s.relay.mu.Lock()
		running := s.relay.running
		s.relay.mu.Unlock()
		if !running {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the session's notifications are still being written")
		}
	}
}

// The gateway's notifications wait for go-sdk's stream headers, then go out
// in order between go-sdk's own writes; after the stream ends they wait for
// the next one.
func TestSessionPushOrder(t *testing.T) {
	var s sessionPush
	s.send("t1", []byte(`{"n":1}`)) // no stream yet: queued
	delivered(t, &s)
	rec := httptest.NewRecorder()
	w, detach := s.attach(rec)
	s.send("t2", []byte(`{"n":2}`)) // the stream's headers are not out: queued
	delivered(t, &s)
	if rec.Body.Len() != 0 {
		t.Fatalf("written before the headers: %q", rec.Body.String())
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	delivered(t, &s)
	_, _ = w.Write([]byte(": ok\n\n"))
	s.send("t3", []byte(`{"n":3}`))
	delivered(t, &s)
	want := "event: message\ndata: {\"n\":1}\n\nevent: message\ndata: {\"n\":2}\n\n: ok\n\nevent: message\ndata: {\"n\":3}\n\n"
	if got := rec.Body.String(); got != want || rec.Header().Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream:\n%q\nwant\n%q", got, want)
	}
	detach()
	s.send("t4", []byte(`{"n":4}`))
	delivered(t, &s)
	if strings.Contains(rec.Body.String(), `"n":4`) || len(s.pending) != 1 {
		t.Fatalf("written after the stream ended: %q (pending %d)", rec.Body.String(), len(s.pending))
	}
}

// Of a task's progress waiting to be written only the newest goes out, and
// none once the task's status is waiting too.
func TestSessionPushCoalesces(t *testing.T) {
	var s sessionPush
	rec := httptest.NewRecorder()
	w, detach := s.attach(rec)
	defer detach()
	s.relay.mu.Lock() // a delivery under way: what comes meanwhile waits
	s.relay.running = true
	s.relay.mu.Unlock()
	s.sendLive("t1", []byte(`{"p":1}`))
	s.sendLive("t1", []byte(`{"p":2}`))
	s.sendLive("t2", []byte(`{"p":1}`))
	s.send("t2", []byte(`{"end":2}`))
	s.relay.mu.Lock()
	s.relay.running, s.relay.again = false, false
	s.relay.mu.Unlock()
	w.WriteHeader(http.StatusOK)
	delivered(t, &s)
	want := "event: message\ndata: {\"p\":2}\n\nevent: message\ndata: {\"end\":2}\n\n"
	if got := rec.Body.String(); got != want {
		t.Fatalf("stream:\n%q\nwant\n%q", got, want)
	}
}
