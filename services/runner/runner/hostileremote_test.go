package runner_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/mcpbus/mcpbus/libs/bus"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testmcp"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// A remote server's words in a failed start's error are bounded like a
// refused handshake's, whatever error carries them: here go-sdk's own
// "mismatching session IDs", which quotes the 2 MiB session id the server
// sent with its tool list. The status is one bus message that must be
// written, or the server is left "starting" with no reason given.
func TestRemoteStartErrorBounded(t *testing.T) {
	url := swappingSessionID(t, func(r *http.Request, body []byte) bool { return bytes.Contains(body, []byte(`"tools/list"`)) })
	e := runnertest.Start(t, lifecycleOpts())
	e.Put(t, model.McpConfig{ID: uuid.NewString(), Name: "remote", Enabled: true,
		Package:   model.Package{Type: model.PackageHTTP, Identifier: url},
		Transport: model.Transport{Type: model.TransportHTTP, URL: url},
		Runtime:   model.Runtime{Eager: true}})
	st := e.WaitState(t, "remote", model.StateError, 10*time.Second)
	if n := utf8.RuneCountInString(st.Message); n > 2*model.CallEventErrorMax || !strings.Contains(st.Message, "session") {
		t.Fatalf("status message of %d characters: %.200q…", n, st.Message)
	}
}

// swappingSessionID serves the test server, answering the requests when
// says with a session id of 2 MiB unlike the one it gave.
func swappingSessionID(t *testing.T, when func(r *http.Request, body []byte) bool) string {
	huge := strings.Repeat("s", 2<<20)
	return testmcp.ServeHTTP(t, "web", nil, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			if when(r, body) {
				w.Header().Set("Mcp-Session-Id", huge)
			}
			h.ServeHTTP(w, r)
		})
	})
}

// The same for a principal's own session of a per-principal server: the
// caller's error carries the server's words bounded (and a bus reply
// cannot carry 2 MiB of them).
func TestRemotePrincipalConnectErrorBounded(t *testing.T) {
	const userTok = "alice-upstream-token-0123456789"
	url := swappingSessionID(t, func(r *http.Request, body []byte) bool {
		return r.Header.Get("Authorization") == "Bearer "+userTok && bytes.Contains(body, []byte(`"notifications/initialized"`))
	})
	opts := lifecycleOpts()
	opts.Resolver = ppResolver{server: "server-own-token-0123456789", user: userTok}
	e := runnertest.Start(t, opts)
	e.Put(t, perPrincipalRemote(url))
	e.WaitState(t, "remote", model.StateRunning, 10*time.Second)
	rep, err := e.NC.RequestMsg(aliceEcho(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	reply := string(rep.Data) + " " + rep.Header.Get(bus.HeaderError)
	if len(reply) > 4*model.CallEventErrorMax || !strings.Contains(reply, "could not connect") {
		t.Fatalf("alice's reply of %d bytes: %.300q…", len(reply), reply)
	}
}

// A remote server that forgets the session (404 on its id) ends it: the
// status says the remote server's session ended, not that a process
// exited (there is none).
func TestRemoteSessionEndSaysSo(t *testing.T) {
	var gone atomic.Bool
	url := testmcp.ServeHTTP(t, "web", nil, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if gone.Load() && r.Header.Get("Mcp-Session-Id") != "" {
				http.Error(w, "session not found", http.StatusNotFound)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	e := runnertest.Start(t, lifecycleOpts())
	e.Put(t, model.McpConfig{ID: uuid.NewString(), Name: "remote", Enabled: true,
		Package:   model.Package{Type: model.PackageHTTP, Identifier: url},
		Transport: model.Transport{Type: model.TransportHTTP, URL: url},
		Runtime:   model.Runtime{Eager: true}})
	e.WaitState(t, "remote", model.StateRunning, 10*time.Second)
	gone.Store(true)
	_, _ = call(t, e, "remote", "echo", `{"message":"hi"}`)
	st := e.WaitState(t, "remote", model.StateError, 10*time.Second)
	if !strings.Contains(st.Message, "remote server") || strings.Contains(st.Message, "process") {
		t.Fatalf("status message %q, want the remote server's session named", st.Message)
	}
}
