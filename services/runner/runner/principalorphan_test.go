package runner_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/libs/testmcp"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// A principal's session dropped while it still connects (its credentials
// changed or were revoked: runtime.forget, an agent's record deleted; or
// the server stopped) is closed once connected, and the call that opened
// it does not go upstream on it: it opens another with the credentials
// now stored (none: refused as having none). Before, the entry left the map but the
// session, connected afterwards, served the call and was then never
// closed: an upstream session opened with the dropped credentials, and its
// goroutines, held until the remote server ended it.
func TestPrincipalSessionDroppedWhileConnectingIsClosed(t *testing.T) {
	const aliceTok, newTok = "alice-token-0123456789", "alice-token-renewed-42"
	var calledNew atomic.Int32 // alice's tools/call with her new token
	var gate atomic.Bool
	gate.Store(true)
	initAsked, release := make(chan struct{}, 1), make(chan struct{})
	var called, deleted atomic.Int32 // alice's tools/call and session DELETEs upstream
	url := testmcp.ServeHTTP(t, "web", nil, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			alice := r.Header.Get("Authorization") == "Bearer "+aliceTok
			if r.Header.Get("Authorization") == "Bearer "+newTok && r.Method == http.MethodPost {
				body, _ := io.ReadAll(r.Body)
				r.Body = io.NopCloser(bytes.NewReader(body))
				if bytes.Contains(body, []byte(`"tools/call"`)) {
					calledNew.Add(1)
				}
			}
			switch {
			case alice && r.Method == http.MethodDelete:
				deleted.Add(1)
			case alice && r.Method == http.MethodPost:
				body, _ := io.ReadAll(r.Body)
				r.Body = io.NopCloser(bytes.NewReader(body))
				var m struct {
					Method string `json:"method"`
				}
				_ = json.Unmarshal(body, &m)
				if m.Method == "tools/call" {
					called.Add(1)
				}
				if m.Method == "initialize" && gate.Load() {
					initAsked <- struct{}{}
					<-release
				}
			}
			h.ServeHTTP(w, r)
		})
	})
	user := &atomic.Value{}
	user.Store(aliceTok)
	o := quickOpts()
	o.Resolver = swapResolver{user: user}
	e := runnertest.Start(t, o)
	e.Put(t, perPrincipalRemote(url))
	e.WaitState(t, "remote", model.StateRunning, 10*time.Second)

	callErr := make(chan error, 1)
	go func() {
		rep, err := e.NC.RequestMsg(aliceEcho(), 15*time.Second)
		if err == nil && rep.Header.Get(bus.HeaderError) != "" {
			err = errors.New(rep.Header.Get(bus.HeaderError))
		}
		callErr <- err
	}()
	select {
	case <-initAsked:
	case <-time.After(10 * time.Second):
		t.Fatal("alice's session never connected")
	}
	// Her credentials replaced while her session connects, as the
	// credential service does it: the new record, then runtime.forget.
	user.Store(newTok)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var st model.Status
	if err := bus.RequestJSON(ctx, e.NC, "mcp.v1.runtime.forget", model.RuntimeRequest{Server: "remote", Principal: "key:alice"}, &st, 0); err != nil {
		t.Fatal(err)
	}
	gate.Store(false)
	close(release)
	select {
	case err := <-callErr:
		// It goes on upon a session opened anew, with her new token.
		if err != nil {
			t.Errorf("the call: %v, want it made on a session with her new credentials", err)
		}
		if n := calledNew.Load(); n != 1 {
			t.Errorf("%d tools/call went upstream with her new token, want 1", n)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the call never ended")
	}
	if n := called.Load(); n != 0 {
		t.Errorf("%d tools/call went upstream on the dropped session", n)
	}
	testkit.WaitFor(t, 5*time.Second, func() (bool, string) {
		return deleted.Load() > 0, fmt.Sprintf("the dropped session closed upstream (%d DELETE)", deleted.Load())
	})
}
