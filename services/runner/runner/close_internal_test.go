package runner

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

// TestStartRacingCloseNeverRuns: a call's start queued on a server's
// goroutine around close's stop (a handover racing a lazy start) never
// runs, and the call is told at once that the server is gone. Behind the
// stop, the loop ran it after it (spawning a child nobody stopped, and
// writing "error: start cancelled" over the handed-over status), or left it
// queued while the call waited out its whole deadline for NETWORK_ERROR;
// ahead of it, it started with the server's context already cancelled.
func TestStartRacingCloseNeverRuns(t *testing.T) {
	for _, startFirst := range []bool{false, true} {
		r := &Runner{opts: Options{ID: "me", MaxServers: 1}, log: quiet, telemetry: newCallTelemetry()}
		r.running.Store(1) // a start that ran would stop at the limit, in error, without spawning
		cfg := &model.McpConfig{Slug: "alpha", Enabled: true,
			Package: model.Package{Type: model.PackageBinary, Identifier: "/bin/true"}, Transport: model.Transport{Type: model.TransportStdio}}
		s := newServer(r, cfg)
		s.lost.Store(true) // no bus here: no status writes

		gate, busy := make(chan struct{}), make(chan struct{})
		s.ops <- func() { close(busy); <-gate } // an operation under way
		<-busy
		queued := func(n int, what string) {
			testkit.WaitFor(t, 5*time.Second, func() (bool, string) { return len(s.ops) == n, what + " not queued" })
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		res := make(chan error, 1)
		closed := make(chan struct{})
		if startFirst {
			go func() { res <- s.ensureRunning(ctx) }()
			queued(1, "the call's start")
			go func() { s.close(model.StateStopped, true); close(closed) }()
			queued(2, "close's stop")
		} else {
			go func() { s.close(model.StateStopped, true); close(closed) }()
			queued(1, "close's stop")
			go func() { res <- s.ensureRunning(ctx) }()
			queued(2, "the call's start")
		}
		begin := time.Now()
		close(gate)

		var err error
		select {
		case err = <-res:
		case <-time.After(10 * time.Second):
			t.Fatalf("start first %v: ensureRunning did not return", startFirst)
		}
		if e := apierr.From(err); e.Code != apierr.ServiceUnavailable || !strings.Contains(e.Message, "no longer managed") || time.Since(begin) > time.Second {
			t.Fatalf("start first %v: the call got %v after %s; want SERVICE_UNAVAILABLE at once, the server gone", startFirst, err, time.Since(begin))
		}
		<-closed
		time.Sleep(50 * time.Millisecond) // a start left queued would run now
		if st := s.status(); st.State != model.StateStopped {
			t.Fatalf("start first %v: state %s (%s) after close: a start ran", startFirst, st.State, st.Message)
		}
	}
}
