package client_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
)

// With no runner up, runtime.status has no responder: the stored states
// answer instead, each saying no runner vouches for it.
func TestStoredStatusWithoutRunners(t *testing.T) {
	nc := startNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	assets, err := bus.EnsureAssets(ctx, js, bus.NewSubjects(""), bus.AssetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st, _ := json.Marshal(model.Status{Server: "fs", State: model.StateRunning, Runner: "r1", UpdatedAt: time.Now().Add(-time.Minute)})
	if _, err := assets.Status.Put(ctx, "fs", st); err != nil {
		t.Fatal(err)
	}
	c := client.New(nc, client.Options{Timeout: 5 * time.Second})
	_, err = c.Status(ctx)
	if !client.NoRunner(err) {
		t.Fatalf("runtime.status without runners: %v", err)
	}
	list, err := c.StoredStatus(ctx, "")
	if err != nil || len(list) != 1 || list[0].Server != "fs" || list[0].State != model.StateRunning ||
		!strings.Contains(list[0].Message, "no runner answers: last stored 1m") {
		t.Fatalf("stored states: %+v %v", list, err)
	}
	if _, err := c.StoredStatus(ctx, "nosuch"); apierr.Of(err) != apierr.NotFound {
		t.Fatalf("a server with no stored state: %v", err)
	}
}
