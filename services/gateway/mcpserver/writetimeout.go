package mcpserver

import (
	"net/http"
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
type deadlineWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func newDeadlineWriter(w http.ResponseWriter, timeout time.Duration) *deadlineWriter {
	return &deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), timeout: timeout}
}

// arm sets the deadline of the next write; also called when the handler
// returns, so that net/http's end of the response gets its time too.
func (d *deadlineWriter) arm() { _ = d.rc.SetWriteDeadline(time.Now().Add(d.timeout)) }

func (d *deadlineWriter) Write(b []byte) (int, error) {
	d.arm()
	return d.ResponseWriter.Write(b)
}

func (d *deadlineWriter) Flush() { _ = d.FlushError() }

// FlushError is what http.ResponseController.Flush calls.
func (d *deadlineWriter) FlushError() error {
	d.arm()
	return d.rc.Flush()
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (d *deadlineWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }
