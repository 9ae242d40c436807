package bus_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/deadline"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

// A request made while the call's limit is paused (the wait for a person's
// answer) is bounded by its own timeout, not left unbounded, and tells the
// other side that timeout, not what the paused limit had left.
func TestRequestWhileTheLimitIsPaused(t *testing.T) {
	nc := testkit.Connect(t, testkit.NATS(t))
	heard := make(chan string, 1)
	if _, err := nc.Subscribe("person", func(m *nats.Msg) { heard <- m.Header.Get(bus.HeaderTimeout) }); err != nil { // never answers
		t.Fatal(err)
	}
	call, cancel := deadline.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	defer deadline.Pause(call)()
	start := time.Now()
	_, err := bus.RequestAnswer(call, nc, nats.NewMsg("person"), 300*time.Millisecond)
	if err == nil {
		t.Fatal("an unanswered request succeeded")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("the request waited %s, want its own 300ms", took)
	}
	if ms, _ := strconv.Atoi(<-heard); ms < 250 || ms > 300 {
		t.Fatalf("Mcp-Timeout-Ms = %d, want about 300", ms)
	}
}
