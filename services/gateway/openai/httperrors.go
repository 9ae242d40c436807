package openai

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// Errors makes every error answer under /v1 an OpenAI error object: the
// answers of the gateway's middleware before these endpoints (401 of auth,
// 403 of a scope or an origin, 415, 413, 429, 404/405 of the router) are in
// the error contract ({code, message, field}), which OpenAI clients cannot
// read. Other paths, successes and the endpoints' own OpenAI errors pass
// through unchanged; the status and the other headers (WWW-Authenticate,
// Retry-After) are kept.
func Errors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1" && !strings.HasPrefix(r.URL.Path, "/v1/") {
			next.ServeHTTP(w, r)
			return
		}
		ew := &errorWriter{ResponseWriter: w}
		next.ServeHTTP(ew, r)
		ew.finish()
	})
}

// errorWriter holds back the body of an error answer to rewrite it.
type errorWriter struct {
	http.ResponseWriter
	status int // an error status held back; 0: passing through
	wrote  bool
	body   bytes.Buffer
}

func (w *errorWriter) WriteHeader(status int) {
	if w.wrote || w.status != 0 {
		return
	}
	if status >= 400 {
		w.status = status
		return
	}
	w.wrote = true
	w.ResponseWriter.WriteHeader(status)
}

func (w *errorWriter) Write(p []byte) (int, error) {
	if !w.wrote && w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.status != 0 {
		return w.body.Write(p)
	}
	return w.ResponseWriter.Write(p)
}

// Flush passes on a flush of a passing answer (a stream).
func (w *errorWriter) Flush() {
	if w.status == 0 {
		_ = http.NewResponseController(w.ResponseWriter).Flush()
	}
}

// Unwrap lets http.ResponseController reach the deadlines.
func (w *errorWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finish writes the held error, as an OpenAI error object unless it is one.
func (w *errorWriter) finish() {
	if w.status == 0 {
		return
	}
	body := w.body.Bytes()
	var probe map[string]json.RawMessage
	if json.Unmarshal(body, &probe) == nil && probe["error"] != nil {
		w.send(body) // the endpoint's own OpenAI error
		return
	}
	var ae apierr.Error
	if json.Unmarshal(body, &ae) != nil || ae.Message == "" {
		ae = apierr.Error{Message: strings.TrimSpace(string(body))}
		if ae.Message == "" {
			ae.Message = http.StatusText(w.status)
		}
	}
	e := &Error{Status: w.status, Message: ae.Message, Type: errorType(w.status), Param: str(ae.Field),
		Code: str(strings.ToLower(string(ae.Code)))}
	data, err := json.Marshal(errorBody{Error: e})
	if err != nil {
		data = []byte(`{"error":{"message":"encoding the error failed","type":"server_error","param":null,"code":null}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.send(append(data, '\n'))
}

func (w *errorWriter) send(body []byte) {
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.ResponseWriter.WriteHeader(w.status)
	_, _ = w.ResponseWriter.Write(body)
}
