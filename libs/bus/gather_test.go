package bus_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

// Gather collects every responder's reply, skips the ones that do not decode,
// ends after the quiet period rather than the whole wait, and at once when no
// one listens.
func TestGather(t *testing.T) {
	nc := testkit.Connect(t, testkit.NATS(t))
	type reply struct {
		N int `json:"n"`
	}
	for _, body := range []string{`{"n":1}`, `{"n":2}`, `not json`} {
		sub, err := nc.Subscribe("who", func(m *nats.Msg) { _ = m.Respond([]byte(body)) })
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sub.Unsubscribe() }()
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	got, err := bus.Gather[reply](context.Background(), nc, "who", 5*time.Second, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(got, func(i, j int) bool { return got[i].N < got[j].N })
	if len(got) != 2 || got[0].N != 1 || got[1].N != 2 {
		t.Fatalf("gathered %+v, want n=1 and n=2", got)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("took %v: the quiet period did not end the gathering", took)
	}

	start = time.Now()
	got, err = bus.Gather[reply](context.Background(), nc, "nobody", 5*time.Second, 0)
	if err != nil || len(got) != 0 {
		t.Fatalf("no responders: %+v, %v", got, err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("no responders took %v, want at once", took)
	}
}
