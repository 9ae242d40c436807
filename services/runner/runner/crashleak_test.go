package runner_test

import (
	"bytes"
	"errors"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testmcp"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// listenGoroutines counts go-sdk's goroutines that wait for the end of a
// client session's subscriptions/listen stream: one per live session of a
// 2026-07-28 server, ended only by ClientSession.Close.
func listenGoroutines() int {
	buf := make([]byte, 16<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("created by github.com/modelcontextprotocol/go-sdk/mcp.callSubscriptionsListen")) {
			n++
		}
	}
	return n
}

// A server that crashes again and again must not leave a goroutine behind
// for each crash: the runner closes the session that ended on its own, as
// it closes the ones it stops (the session's subscriptions/listen goroutine
// lived until Close, which nothing called after a crash).
func TestCrashedSessionsAreClosed(t *testing.T) {
	opts := lifecycleOpts()
	opts.HealthyAfter = time.Millisecond // every crash is a first one: no growing backoff, no giving up
	e := runnertest.Start(t, opts)
	e.Put(t, runnertest.Binary("alpha", testServer))
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	const crashes = 8
	for i := range crashes {
		before := e.Status("alpha").PID
		_, _ = call(t, e, "alpha", "crash", `{}`)
		deadline := time.Now().Add(10 * time.Second)
		for st := e.Status("alpha"); st.State != model.StateRunning || st.PID == before; st = e.Status("alpha") {
			if time.Now().After(deadline) {
				t.Fatalf("crash %d: not restarted: %+v", i+1, st)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// One session is live; the crashed ones' goroutines end at once on Close.
	var n int
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if n = listenGoroutines(); n <= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d subscriptions/listen goroutines after %d crashes, want at most 1 (the live session's)", n, crashes)
		}
	}
}

// clientGoroutines counts the goroutines of the runner's connections to
// remote servers (its HTTP connections and go-sdk's client side of them),
// not the test's remote server's, which runs in this process too.
func clientGoroutines() int {
	buf := make([]byte, 16<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("launch.(*HTTPConn)")) || bytes.Contains(g, []byte("streamableClientConn")) {
			n++
		}
	}
	return n
}

// The same for a caller's own session of a per-principal remote server:
// one the remote server ends (it forgets the session: 404) is closed when
// the runner lets it go, not left with its subscriptions/listen goroutine.
func TestEndedPrincipalSessionsAreClosed(t *testing.T) {
	const userTok = "alice-upstream-token-0123456789"
	var gone atomic.Bool
	url := testmcp.ServeHTTP(t, "web", nil, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if gone.Load() && r.Header.Get("Authorization") == "Bearer "+userTok && r.Header.Get("Mcp-Session-Id") != "" {
				http.Error(w, "session not found", http.StatusNotFound)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	opts := lifecycleOpts()
	opts.Resolver = ppResolver{server: "server-own-token-0123456789", user: userTok}
	e := runnertest.Start(t, opts)
	e.Put(t, perPrincipalRemote(url))
	e.WaitState(t, "remote", model.StateRunning, 10*time.Second)
	aliceCall := func() error {
		rep, err := e.NC.RequestMsg(aliceEcho(), 10*time.Second)
		if err == nil && rep.Header.Get(bus.HeaderError) != "" {
			err = errors.New(rep.Header.Get(bus.HeaderError))
		}
		return err
	}
	// Goroutines while alice has a live session, after a first round.
	if err := aliceCall(); err != nil {
		t.Fatal(err)
	}
	gone.Store(true)
	_ = aliceCall()
	gone.Store(false)
	if err := aliceCall(); err != nil {
		t.Fatal(err)
	}
	base := clientGoroutines()
	const ended = 8
	for i := range ended {
		gone.Store(true)
		_ = aliceCall() // the remote server has forgotten her session: it ends
		gone.Store(false)
		if err := aliceCall(); err != nil { // a new session of hers
			t.Fatalf("round %d: alice's call: %v", i+1, err)
		}
	}
	var n int
	// 15 s: a loaded machine (load average 16) took more than 5 to end them.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if n = clientGoroutines(); n <= base {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines of the runner's remote sessions after %d of alice's sessions ended, %d with one live: ended sessions leave goroutines behind", n, ended, base)
		}
	}
}
