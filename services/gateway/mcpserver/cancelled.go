package mcpserver

import (
	"bytes"
	"mime"
	"net/http"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// A request its client cancelled (notifications/cancelled) gets no
// response: the spec's receiver SHOULD NOT send one, and a client that
// forgot the id flags it (the TypeScript SDK: "Received a response for an
// unknown message ID"). The fast path answers nothing itself; go-sdk v1.8.0
// cancels its handler's context but still writes the handler's error as the
// response. For the requests of a session that go to go-sdk, the gateway
// remembers the id while the POST runs and, once the client cancels it,
// drops the response to that id from the POST's stream.

// watchCancel registers the call req of a go-sdk POST of ls and returns the
// ResponseWriter to give go-sdk and the function that ends the watch.
func (ls *liveSession) watchCancel(w http.ResponseWriter, req *jsonrpc.Request) (http.ResponseWriter, func()) {
	key := idString(req.ID)
	if key == "" {
		return w, func() {}
	}
	cw := &cancelWriter{ResponseWriter: w, id: req.ID}
	if _, dup := ls.sdkCalls.LoadOrStore(key, &cw.cancelled); dup {
		return w, func() {} // go-sdk refuses the duplicate id itself
	}
	return cw, func() { ls.sdkCalls.CompareAndDelete(key, &cw.cancelled) }
}

// markCancelled records that the client cancelled id, a go-sdk call of ls.
func (ls *liveSession) markCancelled(id jsonrpc.ID) {
	if f, ok := ls.sdkCalls.Load(idString(id)); ok {
		f.(*atomic.Bool).Store(true)
	}
}

// cancelWriter passes go-sdk's answer to one POST through, except the
// response to id once the client cancelled it. go-sdk writes each SSE event
// with one Write (data on one line), and a JSON answer with one Write.
type cancelWriter struct {
	http.ResponseWriter
	id        jsonrpc.ID
	cancelled atomic.Bool
	// held is the status of an application/json answer, held back until
	// its body: if that is the dropped response, the POST ends as an event
	// stream of no event instead (as the fast path's). started says the
	// header went out.
	held    int
	started bool
}

func (c *cancelWriter) json() bool {
	mt, _, _ := mime.ParseMediaType(c.Header().Get("Content-Type"))
	return mt == "application/json"
}

func (c *cancelWriter) WriteHeader(code int) {
	if !c.started && c.json() {
		c.held = code
		return
	}
	c.started = true
	c.ResponseWriter.WriteHeader(code)
}

func (c *cancelWriter) Write(b []byte) (int, error) {
	if c.cancelled.Load() && c.isResponse(b) {
		if !c.started {
			c.started = true
			answerNothing(c.ResponseWriter)
		}
		return len(b), nil
	}
	if !c.started {
		c.started = true
		if c.held != 0 {
			c.ResponseWriter.WriteHeader(c.held)
		}
	}
	return c.ResponseWriter.Write(b)
}

// isResponse reports whether b is the response to c.id: a whole JSON body,
// or one SSE event whose data is.
func (c *cancelWriter) isResponse(b []byte) bool {
	data := b
	if !c.json() {
		i := bytes.Index(b, []byte("data: "))
		if i < 0 || (i > 0 && b[i-1] != '\n') {
			return false
		}
		data, _, _ = bytes.Cut(b[i+len("data: "):], []byte("\n"))
	}
	msg, err := jsonrpc.DecodeMessage(data)
	if err != nil {
		return false
	}
	resp, ok := msg.(*jsonrpc.Response)
	return ok && resp.ID == c.id
}

func (c *cancelWriter) Flush() {
	if !c.started && c.json() {
		return // the JSON body comes with its Write
	}
	c.started = true
	// Through the controller: the gateway's writers beneath flush only by
	// Unwrap, and an unflushed event (a server's elicitation/create) would
	// wait for the end of the call it is part of.
	_ = http.NewResponseController(c.ResponseWriter).Flush()
}

func (c *cancelWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }
