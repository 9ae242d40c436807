package client_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/model"
)

// A call whose arguments the bus cannot carry (a message over max_payload:
// nats-server's default 1 MiB, the gateway's body limit by default too, so
// a body at the limit with the call's headers passes it) is refused
// VALIDATION_ERROR on arguments naming both sizes, at once; it was
// INTERNAL_ERROR "nats: maximum payload exceeded" (a 500 at the gateway).
func TestCallOverMaxPayloadSaysSo(t *testing.T) {
	ns, err := embednats.Start(embednats.Options{Port: -1, StoreDir: t.TempDir(), MaxPayload: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	nc, err := ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	subj := bus.NewSubjects("")
	sub, err := nc.Subscribe(subj.Call("echo", model.ToolToken("echo")), func(m *nats.Msg) { _ = m.Respond([]byte(`{"content":[]}`)) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	c := client.New(nc, client.Options{Timeout: 5 * time.Second})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	args := json.RawMessage(`{"m":"` + strings.Repeat("x", int(nc.MaxPayload())-1-8) + `"}`) // max_payload - 1 bytes
	began := time.Now()
	_, err = c.Call(ctx, "echo", "echo", args, nil)
	e := apierr.From(err)
	if e == nil || e.Code != apierr.Validation || e.Field != "arguments" || !strings.Contains(e.Message, "max_payload") {
		t.Fatalf("a call of %d bytes of arguments on a bus of max_payload %d: %v (field %q); want VALIDATION_ERROR on arguments naming max_payload",
			len(args), nc.MaxPayload(), err, e.Field)
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("the refusal took %s", took)
	}
	// A call that fits still goes through.
	if _, err := c.Call(ctx, "echo", "echo", json.RawMessage(`{"m":"hi"}`), nil); err != nil {
		t.Fatal(err)
	}
}
