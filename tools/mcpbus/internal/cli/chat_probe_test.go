package cli

import (
	"context"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
)

// probeSession is a chat session of conversation c1 over a bus where
// pending answers the CLI's probes as the chat service would.
func probeSession(t *testing.T, pending micro.HandlerFunc) *chatSession {
	t.Helper()
	url, _, _ := stubBus(t, "chat", map[string]micro.HandlerFunc{bus.NewSubjects("").Service("chat", "pending"): pending})
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return &chatSession{g: &globals{timeout: 5 * time.Second, stdout: io.Discard, stderr: io.Discard},
		c: client.New(nc, client.Options{}), ctx: context.Background(), conv: "c1",
		events: make(chan model.ChatEvent, 16), sigs: make(chan os.Signal, 1), input: newLineInput(strings.NewReader("")),
		r:           &renderer{out: io.Discard, errw: io.Discard},
		turnTimeout: time.Minute, probeEvery: 100 * time.Millisecond, probeTimeout: 200 * time.Millisecond}
}

// A chat service that is subscribed but never answers (stuck, or the bus
// not coming back) ends the wait for a turn after a few unanswered probes,
// saying so. Before, only "no responders" counted: the CLI waited out
// --turn-timeout (30 min by default).
func TestChatWaitGivesUpOnAServiceThatNeverAnswers(t *testing.T) {
	var probes atomic.Int32
	s := probeSession(t, func(micro.Request) { probes.Add(1) }) // never responds
	began := time.Now()
	_, err := s.wait("t1", model.ChatPendingReply{})
	took := time.Since(began)
	if err == nil || apierr.Of(err) != apierr.ServiceUnavailable || !strings.Contains(err.Error(), "stopped answering") {
		t.Fatalf("wait after %s: %v, want SERVICE_UNAVAILABLE saying the service stopped answering", took, err)
	}
	if took > 10*time.Second || probes.Load() < probeMisses {
		t.Fatalf("gave up after %s and %d probes", took, probes.Load())
	}
	t.Logf("gave up after %s, %d probes: %v", took.Round(time.Millisecond), probes.Load(), err)
}

// A live service whose turn runs long without an event (the model thinking)
// is waited for: its probes are answered, and the turn's end is taken.
func TestChatWaitKeepsASlowTurn(t *testing.T) {
	var probes atomic.Int32
	s := probeSession(t, func(req micro.Request) {
		probes.Add(1)
		_ = req.RespondJSON(model.ChatPendingReply{})
	})
	go func() {
		deadline := time.Now().Add(10 * time.Second)
		for probes.Load() < 2*probeMisses && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		s.events <- model.ChatEvent{Kind: model.ChatEventDone, Turn: "t1", Conversation: "c1", Done: &model.ChatDone{}}
	}()
	done, err := s.wait("t1", model.ChatPendingReply{})
	if err != nil || done == nil {
		t.Fatalf("wait: %v, %v after %d probes", done, err, probes.Load())
	}
	if probes.Load() < 2*probeMisses {
		t.Fatalf("only %d probes before the end", probes.Load())
	}
}
