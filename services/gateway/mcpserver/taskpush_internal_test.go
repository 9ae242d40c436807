package mcpserver

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The gateway's notifications wait for go-sdk's stream headers, then go out
// in order between go-sdk's own writes; after the stream ends they wait for
// the next one.
func TestSessionPushOrder(t *testing.T) {
	var s sessionPush
	s.send([]byte(`{"n":1}`)) // no stream yet: queued
	rec := httptest.NewRecorder()
	w, detach := s.attach(rec)
	s.send([]byte(`{"n":2}`)) // the stream's headers are not out: queued
	if rec.Body.Len() != 0 {
		t.Fatalf("written before the headers: %q", rec.Body.String())
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(": ok\n\n"))
	s.send([]byte(`{"n":3}`))
	want := "event: message\ndata: {\"n\":1}\n\nevent: message\ndata: {\"n\":2}\n\n: ok\n\nevent: message\ndata: {\"n\":3}\n\n"
	if got := rec.Body.String(); got != want || rec.Header().Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream:\n%q\nwant\n%q", got, want)
	}
	detach()
	s.send([]byte(`{"n":4}`))
	if strings.Contains(rec.Body.String(), `"n":4`) || len(s.pending) != 1 {
		t.Fatalf("written after the stream ended: %q (pending %d)", rec.Body.String(), len(s.pending))
	}
}
