package events_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/chat/events"
	"github.com/mcpbus/mcpbus/services/chat/loop"
)

var _ = loop.Deps{Publish: (*events.Publisher)(nil).Publish}

// sink collects the events published on the chat subjects.
type sink struct {
	mu   sync.Mutex
	subj []string
	evs  []model.ChatEvent
	raw  [][]byte
}

func listen(t *testing.T, nc *nats.Conn) *sink {
	t.Helper()
	s := &sink{}
	sub, err := nc.Subscribe("mcp.v1.events.chat.>", func(m *nats.Msg) {
		var ev model.ChatEvent
		dec := json.NewDecoder(strings.NewReader(string(m.Data)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ev); err != nil {
			t.Errorf("not a ChatEvent: %s: %v", m.Data, err)
		}
		s.mu.Lock()
		s.subj = append(s.subj, m.Subject)
		s.evs = append(s.evs, ev)
		s.raw = append(s.raw, m.Data)
		s.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *sink) wait(t *testing.T, n int) []model.ChatEvent {
	t.Helper()
	testkit.WaitFor(t, 5*time.Second, func() (bool, string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.evs) >= n, fmt.Sprintf("%d of %d events", len(s.evs), n)
	})
	time.Sleep(50 * time.Millisecond) // nothing more should come
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]model.ChatEvent(nil), s.evs...)
}

func setup(t *testing.T, opts events.Options) (*events.Publisher, *sink) {
	t.Helper()
	ns := testkit.NATS(t)
	s := listen(t, testkit.Connect(t, ns))
	p := events.New(testkit.Connect(t, ns), opts)
	t.Cleanup(p.Close)
	return p, s
}

func delta(conv, text string) model.ChatEvent {
	return model.ChatEvent{Kind: model.ChatEventTextDelta, Conversation: conv, Turn: "t1", Text: text}
}

func TestOrderAndCoalescing(t *testing.T) {
	p, s := setup(t, events.Options{Interval: time.Hour}) // only events flush
	for _, w := range []string{"Hel", "lo", ", "} {
		p.Publish(delta("c1", w))
	}
	p.Publish(model.ChatEvent{Kind: model.ChatEventToolCall, Conversation: "c1", Turn: "t1",
		ToolCall: &model.ChatToolCall{CallID: "k", Tool: "fs__read", State: model.ToolCallStarted}})
	p.Publish(delta("c1", "wor"))
	p.Publish(delta("c1", "ld"))
	p.Publish(model.ChatEvent{Kind: model.ChatEventUsage, Conversation: "c1", Turn: "t1", Usage: &model.ChatUsage{Step: 1, InputTokens: 3}})
	p.Publish(model.ChatEvent{Kind: model.ChatEventDone, Conversation: "c1", Turn: "t1", Done: &model.ChatDone{Reason: model.TurnFinal, Steps: 1}})
	got := s.wait(t, 5)
	var kinds []string
	for _, ev := range got {
		k := ev.Kind
		if ev.Kind == model.ChatEventTextDelta {
			k += ":" + ev.Text
		}
		kinds = append(kinds, k)
	}
	want := []string{"text_delta:Hello, ", "tool_call", "text_delta:world", "usage", "done"}
	if !reflect.DeepEqual(kinds, want) {
		t.Fatalf("got %q, want %q", kinds, want)
	}
	for _, sub := range s.subj {
		if sub != "mcp.v1.events.chat.c1" {
			t.Fatalf("subject %s", sub)
		}
	}
}

func TestIntervalFlushes(t *testing.T) {
	p, s := setup(t, events.Options{Interval: 20 * time.Millisecond})
	for i := range 100 {
		p.Publish(delta("c2", fmt.Sprint(i%10)))
	}
	time.Sleep(100 * time.Millisecond)
	p.Publish(delta("c2", "!"))
	got := s.wait(t, 2)
	var text strings.Builder
	for _, ev := range got {
		text.WriteString(ev.Text)
	}
	if want := strings.Repeat("0123456789", 10) + "!"; text.String() != want {
		t.Fatalf("text %q", text.String())
	}
	if len(got) > 10 {
		t.Fatalf("%d events for 101 deltas: not coalesced", len(got))
	}
}

func TestMaxTextAndTurns(t *testing.T) {
	p, s := setup(t, events.Options{Interval: time.Hour, MaxText: 4})
	p.Publish(delta("c3", "ab"))
	p.Publish(delta("c3", "cd")) // 4 bytes: flushed
	p.Publish(delta("c3", "e"))
	ev := delta("c3", "f")
	ev.Turn = "t2" // another turn is never merged
	p.Publish(ev)
	p.Flush()
	got := s.wait(t, 3)
	if len(got) != 3 || got[0].Text != "abcd" || got[1].Text != "e" || got[2].Text != "f" || got[2].Turn != "t2" {
		t.Fatalf("got %+v", got)
	}
}

func TestConcurrentPublishers(t *testing.T) {
	p, s := setup(t, events.Options{Interval: 5 * time.Millisecond})
	const convs, per = 8, 200
	var wg sync.WaitGroup
	for c := range convs {
		wg.Go(func() {
			conv := fmt.Sprintf("conv-%d", c)
			for i := range per {
				if i%50 == 49 {
					p.Publish(model.ChatEvent{Kind: model.ChatEventUsage, Conversation: conv, Turn: "t1", Usage: &model.ChatUsage{Step: i}})
					continue
				}
				p.Publish(delta(conv, fmt.Sprintf("%d;", i)))
			}
			p.Publish(model.ChatEvent{Kind: model.ChatEventDone, Conversation: conv, Turn: "t1", Done: &model.ChatDone{Reason: model.TurnFinal}})
		})
	}
	wg.Wait()
	testkit.WaitFor(t, 5*time.Second, func() (bool, string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		n := 0
		for _, ev := range s.evs {
			if ev.Kind == model.ChatEventDone {
				n++
			}
		}
		return n == convs, fmt.Sprintf("%d done", n)
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	// Per conversation: the deltas concatenate to the numbers in order, the
	// usages sit where they were published, done comes last.
	for c := range convs {
		conv := fmt.Sprintf("conv-%d", c)
		var seq strings.Builder
		for i, ev := range s.evs {
			if ev.Conversation != conv {
				continue
			}
			if s.subj[i] != "mcp.v1.events.chat."+conv {
				t.Fatalf("subject %s for %s", s.subj[i], conv)
			}
			switch ev.Kind {
			case model.ChatEventTextDelta:
				seq.WriteString(ev.Text)
			case model.ChatEventUsage:
				fmt.Fprintf(&seq, "U%d;", ev.Usage.Step)
			case model.ChatEventDone:
				seq.WriteString("D")
			}
		}
		var want strings.Builder
		for i := range per {
			if i%50 == 49 {
				fmt.Fprintf(&want, "U%d;", i)
			} else {
				fmt.Fprintf(&want, "%d;", i)
			}
		}
		want.WriteString("D")
		if seq.String() != want.String() {
			t.Fatalf("%s: got %s", conv, seq.String())
		}
	}
}

func TestJSONRoundTrip(t *testing.T) {
	p, s := setup(t, events.Options{})
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	in := []model.ChatEvent{
		{Kind: model.ChatEventToolCall, Conversation: "c5", Turn: "t1", At: at, ToolCall: &model.ChatToolCall{
			CallID: "k", Tool: "fs__read", State: model.ToolCallCompleted, Arguments: json.RawMessage(`{"a":1}`), Summary: "ok", DurationMS: 1.5}},
		{Kind: model.ChatEventError, Conversation: "c5", Turn: "t1", At: at, Error: apierr.New(apierr.Internal, "boom")},
		{Kind: model.ChatEventDone, Conversation: "c5", Turn: "t1", At: at, Done: &model.ChatDone{Reason: model.TurnFinal, Steps: 2}},
	}
	for _, ev := range in {
		p.Publish(ev)
	}
	p.Publish(model.ChatEvent{Kind: model.ChatEventDone, Conversation: "bad.id", Turn: "t1"}) // dropped
	got := s.wait(t, 3)
	if len(got) != 3 {
		t.Fatalf("got %d events", len(got))
	}
	for i := range in {
		want, _ := json.Marshal(in[i])
		if string(s.raw[i]) != string(want) {
			t.Fatalf("event %d:\n got %s\nwant %s", i, s.raw[i], want)
		}
		if got[i].Kind != in[i].Kind || !got[i].At.Equal(at) {
			t.Fatalf("event %d: %+v", i, got[i])
		}
	}
	p.Close()
	p.Publish(delta("c5", "late")) // after Close: dropped, no panic
}
