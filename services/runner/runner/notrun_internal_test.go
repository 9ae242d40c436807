package runner

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// TestCallPastItsLeaseDidNotRun: a call that reaches a server whose lease
// ran out by this runner's clock (it was frozen), or one this runner let go,
// is refused as not run (bus.ErrNotRun) whatever state the server is in, so
// callers send it again to the new owner; the reply header carries it.
func TestCallPastItsLeaseDidNotRun(t *testing.T) {
	s := stoppedServer()
	defer s.cancel()
	s.state = model.StateRunning
	ended := time.Now().Add(-time.Millisecond)
	s.leaseEnd.Store(&ended)
	_, _, err := s.call(context.Background(), caller{}, nats.Header{}, "read", nil)
	if !errors.Is(err, bus.ErrNotRun) || apierr.Of(err) != apierr.ServiceUnavailable {
		t.Fatalf("call past the lease: %v, want SERVICE_UNAVAILABLE not run", err)
	}
	s.leaseEnd.Store(nil)
	s.cancel() // let go: close cancels first
	if _, _, err := s.call(context.Background(), caller{}, nats.Header{}, "read", nil); !errors.Is(err, bus.ErrNotRun) {
		t.Fatalf("call after the server was let go: %v, want not run", err)
	}
	m := nats.NewMsg("x")
	m.Header.Set(bus.HeaderErrorCode, "503")
	m.Header.Set(bus.HeaderNotRun, "true")
	m.Data = apierr.New(apierr.ServiceUnavailable, "moved").JSON()
	if e := bus.ReplyError(m); !errors.Is(e, bus.ErrNotRun) || e.Code != apierr.ServiceUnavailable || e.Message != "moved" {
		t.Fatalf("reply error %v, want the runner's error with ErrNotRun", e)
	}
}
