package runner_test

import (
	"bytes"
	"runtime"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
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
