package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/testkit"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/gateway/mcpserver"
)

// catalogEnv is a bus with the shared assets and no runner: the catalog is
// just data in KV mcp_tools.
func catalogEnv(t *testing.T) (*embednats.Server, jetstream.KeyValue) {
	t.Helper()
	ns, err := embednats.Start(embednats.Options{InProcessOnly: true, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	nc := testkit.Connect(t, ns)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	assets, err := bus.EnsureAssets(ctx, js, bus.NewSubjects(""), bus.AssetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns, assets.Tools
}

func fakeCatalog(server string, n int, desc string) model.Catalog {
	cat := model.Catalog{Server: server, UpdatedAt: time.Now().UTC()}
	for i := range n {
		tool := fmt.Sprintf("tool_%03d", i)
		cat.Tools = append(cat.Tools, model.Tool{
			Name: model.NamespacedName(server, tool), Server: server, Tool: tool,
			Subject:     "mcp.v1.call." + server + "." + tool,
			Description: desc,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`),
		})
	}
	return cat
}

func putCatalog(t *testing.T, kv jetstream.KeyValue, cat model.Catalog) {
	t.Helper()
	data, _ := json.Marshal(cat)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := kv.Put(ctx, cat.Server, data); err != nil {
		t.Fatal(err)
	}
}

// 10 servers × 100 tools written straight into KV: the aggregate loads and
// lists all 1,000 from memory, and follows a change of one catalog.
func TestThousandTools(t *testing.T) {
	ns, kv := catalogEnv(t)
	for s := range 10 {
		putCatalog(t, kv, fakeCatalog(fmt.Sprintf("srv%02d", s), 100, "v1"))
	}
	// Entries that cannot be served are left out without harming the rest.
	putCatalog(t, kv, model.Catalog{Server: "broken", Tools: []model.Tool{
		{Name: "broken__str", Server: "broken", Tool: "str", InputSchema: json.RawMessage(`{"type":"string"}`)},
		{Name: "broken__arr", Server: "broken", Tool: "arr", InputSchema: json.RawMessage(`[1,2]`)},
	}})
	nc := testkit.Connect(t, ns)

	begin := time.Now()
	agg, err := mcpserver.New(context.Background(), nc, mcpserver.Options{NoAuth: true, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agg.Close)
	loaded := time.Since(begin)
	srv := httptest.NewServer(agg.Handler())
	t.Cleanup(srv.Close)

	begin = time.Now()
	c := connect(t, srv.URL, "", nil)
	connected := time.Since(begin)
	begin = time.Now()
	list := tools(t, c)
	listed := time.Since(begin)
	begin = time.Now()
	list2 := tools(t, c)
	relisted := time.Since(begin)
	t.Logf("1,000 tools: New %s, first connect (builds the key's server) %s, tools/list %s, again %s", loaded, connected, listed, relisted)
	if len(list) != 1000 || len(list2) != 1000 {
		t.Fatalf("listed %d then %d tools, want 1000", len(list), len(list2))
	}
	for s := range 10 {
		for i := range 100 {
			name := fmt.Sprintf("srv%02d__tool_%03d", s, i)
			tool, ok := list[name]
			if !ok {
				t.Fatalf("%s missing", name)
			}
			if tool.Meta[mcpserver.MetaServer] != fmt.Sprintf("srv%02d", s) || tool.Meta[mcpserver.MetaTool] != fmt.Sprintf("tool_%03d", i) {
				t.Fatalf("%s _meta %v", name, tool.Meta)
			}
		}
	}
	if listed > 2*time.Second {
		t.Fatalf("tools/list of 1,000 tools took %s", listed)
	}

	// One catalog changes: the client hears of it and sees the new version.
	begin = time.Now()
	putCatalog(t, kv, fakeCatalog("srv03", 50, "v2"))
	waitListChanged(t, c, "a catalog update")
	for {
		list = tools(t, c)
		if len(list) == 950 && list["srv03__tool_000"].Description == "v2" {
			break
		}
		if time.Since(begin) > 5*time.Second {
			t.Fatalf("after the update: %d tools, srv03__tool_000 %q", len(list), list["srv03__tool_000"].Description)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("catalog update visible after %s", time.Since(begin))
	if _, ok := list["srv03__tool_050"]; ok {
		t.Fatal("a tool dropped from its catalog is still listed")
	}

	// A catalog deleted from KV (server removed) takes its tools away.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := kv.Delete(ctx, "srv09"); err != nil {
		t.Fatal(err)
	}
	waitListChanged(t, c, "a catalog delete")
	for begin = time.Now(); len(tools(t, c)) != 850; {
		if time.Since(begin) > 5*time.Second {
			t.Fatal("srv09's tools still listed after its catalog was deleted")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Two catalogs whose namespaced names clash ("a" + "b__c" and "a__b" + "c")
// both stay visible, under distinct stable names.
func TestClashingNames(t *testing.T) {
	ns, kv := catalogEnv(t)
	schema := json.RawMessage(`{"type":"object"}`)
	putCatalog(t, kv, model.Catalog{Server: "a", Tools: []model.Tool{{Name: "a__b__c", Server: "a", Tool: "b__c", InputSchema: schema}}})
	putCatalog(t, kv, model.Catalog{Server: "a__b", Tools: []model.Tool{{Name: "a__b__c", Server: "a__b", Tool: "c", InputSchema: schema}}})
	nc, err := ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	names := func() map[string]string {
		agg, err := mcpserver.New(context.Background(), nc, mcpserver.Options{NoAuth: true, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		defer agg.Close()
		srv := httptest.NewServer(agg.Handler())
		defer srv.Close()
		c := connect(t, srv.URL, "", nil)
		defer c.Close()
		out := map[string]string{}
		for name, tool := range tools(t, c) {
			out[tool.Meta[mcpserver.MetaServer].(string)] = name
		}
		return out
	}
	first := names()
	if len(first) != 2 || first["a"] == first["a__b"] {
		t.Fatalf("clashing tools listed as %v", first)
	}
	for _, n := range first {
		if len(n) > model.MaxNameLen || n == "a__b__c" {
			t.Fatalf("clash resolved to %q", n)
		}
	}
	if again := names(); again["a"] != first["a"] || again["a__b"] != first["a__b"] {
		t.Fatalf("names not stable: %v then %v", first, again)
	}
}

// The aggregate keeps following the catalog across a restart of the NATS
// server: a catalog deleted and one added after the restart both show.
func TestCatalogSurvivesServerRestart(t *testing.T) {
	ns, err := embednats.Start(embednats.Options{Port: -1, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := ns.ConnectTCP(nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	agg, err := mcpserver.New(context.Background(), nc, mcpserver.Options{NoAuth: true, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agg.Close)
	srv := httptest.NewServer(agg.Handler())
	t.Cleanup(srv.Close)
	kvOf := func(ns *embednats.Server) jetstream.KeyValue {
		c := testkit.Connect(t, ns)
		js, _ := jetstream.New(c)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		kv, err := js.KeyValue(ctx, bus.BucketTools)
		if err != nil {
			t.Fatal(err)
		}
		return kv
	}
	putCatalog(t, kvOf(ns), fakeCatalog("before", 1, "v1"))
	c := connect(t, srv.URL, "", nil)
	waitTools := func(want ...string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			got := slices.Sorted(maps.Keys(tools(t, c)))
			if slices.Equal(got, want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("tools %v, want %v", got, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitTools("before__tool_000")

	ns.Stop()
	ns2, err := embednats.Start(ns.Options())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns2.Stop)
	kv2 := kvOf(ns2)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := kv2.Delete(ctx, "before"); err != nil {
		t.Fatal(err)
	}
	putCatalog(t, kv2, fakeCatalog("after", 1, "v1"))
	waitTools("after__tool_000")
}
