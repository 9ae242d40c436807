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

// A tool is found by its listed name and by <server>__<tool> as its server
// names it, unless that name is another tool's listed name or two tools'.
func TestToolByTheServersName(t *testing.T) {
	c := newCatalog(slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	dotted := model.NamespacedName("fs", "files.remove")
	clashA, clashB := model.ClashName("a__b__c", "a", "b__c"), model.ClashName("a__b__c", "a__b", "c")
	c.replace(map[string]model.Catalog{
		"fs": {Server: "fs", Tools: []model.Tool{
			{Name: dotted, Server: "fs", Tool: "files.remove"},
			{Name: "fs__read", Server: "fs", Tool: "read"},
			// Its own name is another tool's listed one: that tool wins.
			{Name: "fs__read_1a2b3c4d", Server: "fs", Tool: "read", Description: "renamed"},
		}},
		"a":    {Server: "a", Tools: []model.Tool{{Name: clashA, Server: "a", Tool: "b__c"}}},
		"a__b": {Server: "a__b", Tools: []model.Tool{{Name: clashB, Server: "a__b", Tool: "c"}}},
	})
	for name, want := range map[string]string{
		dotted:             dotted,
		"fs__files.remove": dotted,
		"fs__read":         "fs__read",
		"a__b__c":          "", // two tools' own name: neither
		clashA:             clashA,
	} {
		got, ok := c.tool(name)
		if want == "" && ok || want != "" && (!ok || got.Name != want || got.Description == "renamed") {
			t.Errorf("tool(%q) = %q, %v; want %q", name, got.Name, ok, want)
		}
	}
}
