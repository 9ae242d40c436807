package bus_test

import (
	"context"
	"strconv"
	"strings"
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

// The answers subjects of RequestAnswer cannot be guessed from earlier
// ones: any agent may publish to answers subjects, so one it could predict
// would let it answer another caller's elicitation.
func TestAnswerSubjectsUnguessable(t *testing.T) {
	nc := testkit.Connect(t, testkit.NATS(t))
	if _, err := nc.Subscribe("asker", func(m *nats.Msg) { _ = m.Respond([]byte(m.Reply)) }); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 2 {
		reply, err := bus.RequestAnswer(context.Background(), nc, nats.NewMsg("asker"), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		subject := string(reply.Data)
		prefix := nc.Opts.InboxPrefix
		if prefix == "" {
			prefix = "_INBOX"
		}
		id, ok := strings.CutPrefix(subject, prefix+"."+bus.AnswersToken+".")
		if !ok || len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" {
			t.Fatalf("answers subject %s, want %s.%s.<128 random bits in hex>", subject, prefix, bus.AnswersToken)
		}
		ids = append(ids, id)
	}
	if ids[0][:12] == ids[1][:12] {
		t.Fatalf("two answers subjects share their first 12 characters: %v", ids)
	}
}
