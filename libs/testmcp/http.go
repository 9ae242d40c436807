package testmcp

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// RequireBearer wraps h so that requests without "Authorization: Bearer token"
// get 401. An empty token lets everything through.
func RequireBearer(token string, h http.Handler) http.Handler {
	if token == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// ServeHTTP serves the test server over Streamable HTTP at <url>/mcp with
// go-sdk's handler and opts (nil: stateful, SSE answers), behind wrap when
// not nil. It returns the MCP endpoint's URL; the server stops when the
// test ends, cutting the connections of clients still connected.
func ServeHTTP(t testing.TB, name string, opts *mcp.StreamableHTTPOptions, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	return ServeServerHTTP(t, NewServer(name), opts, wrap)
}

// ServeServerHTTP is ServeHTTP of another go-sdk server s (NewDriftServer,
// NewRenameServer).
func ServeServerHTTP(t testing.TB, s *mcp.Server, opts *mcp.StreamableHTTPOptions, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, opts)
	if wrap != nil {
		h = wrap(h)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		// Streams a client keeps open (subscriptions/listen) would hold Close up.
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv.URL + "/mcp"
}

// AnswerMethod is a wrap for ServeHTTP: POSTs of JSON-RPC method are answered
// by answer (with the request's id, as JSON), everything else by the server.
func AnswerMethod(method string, answer func(w http.ResponseWriter, r *http.Request, id json.RawMessage)) func(http.Handler) http.Handler {
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost {
				h.ServeHTTP(w, r)
				return
			}
			body, _ := io.ReadAll(r.Body)
			var m struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			if json.Unmarshal(body, &m) != nil || m.Method != method {
				r.Body = io.NopCloser(bytes.NewReader(body))
				h.ServeHTTP(w, r)
				return
			}
			answer(w, r, m.ID)
		})
	}
}

// OnMethod is a wrap for ServeHTTP: seen is told the JSON-RPC method of each
// POST (with the request, its body left to read) before the server answers
// it, as tests that check what reached the upstream need.
func OnMethod(seen func(method string, r *http.Request)) func(http.Handler) http.Handler {
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost {
				body, _ := io.ReadAll(r.Body)
				r.Body = io.NopCloser(bytes.NewReader(body))
				var m struct {
					Method string `json:"method"`
				}
				if json.Unmarshal(body, &m) == nil {
					seen(m.Method, r)
				}
			}
			h.ServeHTTP(w, r)
		})
	}
}
