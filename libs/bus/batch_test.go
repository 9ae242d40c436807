package bus_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/testkit"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/bus"
)

// The batcher delivers every message, in order, no later than its delay;
// a full batch goes at once and Flush empties the queue.
func TestBatcher(t *testing.T) {
	ns := testkit.NATS(t)
	pub := testkit.Connect(t, ns)
	sub := testkit.Connect(t, ns)
	got := make(chan string, 1000)
	if _, err := sub.Subscribe("ev.>", func(m *nats.Msg) { got <- string(m.Data) }); err != nil {
		t.Fatal(err)
	}
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}
	expect := func(what string, from, to int, within time.Duration) {
		t.Helper()
		deadline := time.After(within)
		for i := from; i < to; i++ {
			select {
			case s := <-got:
				if s != strconv.Itoa(i) {
					t.Fatalf("%s: message %q, want %d (order lost)", what, s, i)
				}
			case <-deadline:
				t.Fatalf("%s: message %d not delivered within %s", what, i, within)
			}
		}
	}
	msg := func(i int) *nats.Msg {
		return &nats.Msg{Subject: "ev." + strconv.Itoa(i%3), Data: []byte(strconv.Itoa(i))}
	}

	// Delay: nothing before it, everything soon after.
	b := bus.NewBatcher(pub, 150*time.Millisecond, 100)
	for i := 0; i < 10; i++ {
		b.Publish(msg(i))
	}
	select {
	case s := <-got:
		t.Fatalf("message %s published before the delay", s)
	case <-time.After(50 * time.Millisecond):
	}
	expect("delayed batch", 0, 10, 2*time.Second)

	// A full batch goes at once, the rest after the delay.
	b = bus.NewBatcher(pub, time.Hour, 20)
	for i := 0; i < 25; i++ {
		b.Publish(msg(i))
	}
	expect("full batch", 0, 20, 2*time.Second)
	select {
	case s := <-got:
		t.Fatalf("message %s of an unfilled batch published before the delay", s)
	case <-time.After(100 * time.Millisecond):
	}
	// Flush (shutdown) sends what waits.
	b.Flush()
	expect("flush", 20, 25, 2*time.Second)

	// Concurrent publishers: nothing lost.
	b = bus.NewBatcher(pub, time.Millisecond, 7)
	done := make(chan struct{})
	for w := 0; w < 4; w++ {
		go func() {
			for i := 0; i < 100; i++ {
				b.Publish(&nats.Msg{Subject: "ev.c", Data: []byte("x")})
			}
			done <- struct{}{}
		}()
	}
	for w := 0; w < 4; w++ {
		<-done
	}
	b.Flush()
	for n := 0; n < 400; n++ {
		select {
		case <-got:
		case <-time.After(2 * time.Second):
			t.Fatalf("%d of 400 concurrent messages delivered", n)
		}
	}
}
