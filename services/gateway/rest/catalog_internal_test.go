package rest

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

// A tool the copy has not seen yet (its watch lags a server just enabled)
// is found in the bucket itself; a name that is not <server>__<tool>, or a
// tool the bucket does not hold, is not.
func TestFreshReadsTheBucketOnAMiss(t *testing.T) {
	nc := testkit.Connect(t, testkit.NATS(t))
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	assets, err := bus.EnsureAssets(ctx, js, bus.NewSubjects(""), bus.AssetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cat := model.Catalog{Server: "fresh", Tools: []model.Tool{{Name: "fresh__echo", Server: "fresh", Tool: "echo",
		InputSchema: json.RawMessage(`{"type":"object"}`)}}}
	data, _ := json.Marshal(cat)
	if _, err := assets.Tools.Put(ctx, "fresh", data); err != nil {
		t.Fatal(err)
	}
	c := newCatalog(slog.New(slog.NewTextHandler(io.Discard, nil)), assets.Tools) // never watched: always behind
	if _, ok := c.tool("fresh__echo"); ok {
		t.Fatal("an unwatched copy holds the tool")
	}
	if tool, ok := c.fresh(ctx, "fresh__echo"); !ok || tool.Server != "fresh" || tool.Tool != "echo" {
		t.Fatalf("fresh = %+v, %v; want the bucket's tool", tool, ok)
	}
	for _, name := range []string{"fresh__other", "nobody__echo", "no-separator", "Bad Slug__echo"} {
		if tool, ok := c.fresh(ctx, name); ok {
			t.Fatalf("fresh(%q) = %+v", name, tool)
		}
	}
}
