package mcpserver

import (
	"net/http"
	"strings"
	"time"
)

// deadlineWriter gives each write of a /mcp response, and each flush (when
// an SSE event goes out), a deadline of its own. The endpoint has no write
// deadline as a whole (its streams stay open for long), and go-sdk writes
// an event under the stream's lock, from whichever goroutine notifies: a
// client that opens a stream and stops reading would otherwise block that
// goroutine, and every later notification of the session, for as long as it
// keeps the connection. Past the deadline the write fails, net/http cancels
// the request and closes the connection, and later writes fail at once.
//
// It also marks each event stream for proxies (WriteHeader).
type deadlineWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	started bool // the header is written
}

func newDeadlineWriter(w http.ResponseWriter, timeout time.Duration) *deadlineWriter {
	return &deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), timeout: timeout}
}

// arm sets the deadline of the next write; also called when the handler
// returns, so that net/http's end of the response gets its time too.
func (d *deadlineWriter) arm() { _ = d.rc.SetWriteDeadline(time.Now().Add(d.timeout)) }

// WriteHeader adds X-Accel-Buffering: no to an event stream, so that a
// proxy (nginx and the like) passes each event on at once rather than
// holding a call's progress and a session's notifications in its buffer:
// the 2026-07-28 transport asks it of servers for every SSE stream, and the
// gateway's other streams send it too. go-sdk sets no such header.
func (d *deadlineWriter) WriteHeader(code int) {
	if !d.started {
		d.started = true
		if h := d.Header(); strings.HasPrefix(h.Get("Content-Type"), "text/event-stream") {
			h.Set("X-Accel-Buffering", "no")
		}
	}
	d.ResponseWriter.WriteHeader(code)
}

func (d *deadlineWriter) Write(b []byte) (int, error) {
	if !d.started {
		d.WriteHeader(http.StatusOK) // as net/http would, with the mark
	}
	d.arm()
	return d.ResponseWriter.Write(b)
}

func (d *deadlineWriter) Flush() { _ = d.FlushError() }

// FlushError is what http.ResponseController.Flush calls.
func (d *deadlineWriter) FlushError() error {
	if !d.started {
		d.WriteHeader(http.StatusOK) // as net/http would, with the mark
	}
	d.arm()
	return d.rc.Flush()
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (d *deadlineWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }
