package llmtest

import (
	"encoding/json"
	"io"
	"net/http"
	"time"
)

func readAll(r *http.Request) ([]byte, error) { return io.ReadAll(r.Body) }

// sse writes server-sent events, sleeping delay before each.
type sse struct {
	w     http.ResponseWriter
	r     *http.Request
	delay time.Duration
}

func newSSE(w http.ResponseWriter, r *http.Request, delay time.Duration) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	return &sse{w: w, r: r, delay: delay}
}

// raw writes one event with data as is; false once the client has gone.
func (e *sse) raw(event, data string) bool {
	if e.delay > 0 {
		t := time.NewTimer(e.delay)
		select {
		case <-t.C:
		case <-e.r.Context().Done():
			t.Stop()
			return false
		}
	}
	msg := ""
	if event != "" {
		msg = "event: " + event + "\n"
	}
	msg += "data: " + data + "\n\n"
	if _, err := io.WriteString(e.w, msg); err != nil {
		return false
	}
	if f, ok := e.w.(http.Flusher); ok {
		f.Flush()
	}
	return e.r.Context().Err() == nil
}

func (e *sse) send(event string, v any) bool {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // our own values
	}
	return e.raw(event, string(b))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func sleep(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

// jsonArg is args as a JSON value: itself when valid, else a JSON string.
func jsonArg(args string) json.RawMessage {
	if args == "" {
		return json.RawMessage(`{}`)
	}
	if json.Valid([]byte(args)) {
		return json.RawMessage(args)
	}
	b, _ := json.Marshal(args)
	return b
}

type obj = map[string]any

// callIDs are the ids of the reply's tool calls: each call's own, or a new
// one with prefix (call_ for OpenAI, toolu_ for Anthropic).
func (s *Server) callIDs(calls []ToolCall, prefix string) []string {
	ids := make([]string, len(calls))
	for i, c := range calls {
		ids[i] = c.ID
		if ids[i] == "" {
			ids[i] = s.nextID(prefix)
		}
	}
	return ids
}
