package rest_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
	"github.com/mcpbus/mcpbus/services/gateway/rest"
)

func putCatalog(t *testing.T, ns *embednats.Server, slug string) {
	t.Helper()
	nc, err := ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, bus.BucketTools)
	if err != nil {
		t.Fatal(err)
	}
	cat := model.Catalog{Server: slug, Tools: []model.Tool{{Name: slug + "__echo", Server: slug, Tool: "echo",
		InputSchema: json.RawMessage(`{"type":"object"}`)}}}
	data, _ := json.Marshal(cat)
	if _, err := kv.Put(ctx, slug, data); err != nil {
		t.Fatal(err)
	}
}

func listed(t *testing.T, api *rest.API, name string) bool {
	t.Helper()
	var h http.Handler
	for _, r := range api.Routes() {
		if r.Pattern == "/mcp/tools" {
			h = r.Handler()
		}
	}
	req := httptest.NewRequest("GET", "/mcp/tools", nil)
	req = req.WithContext(auth.WithPrincipal(req.Context(), auth.Anonymous()))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	var out rest.ToolsReply
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	for _, tool := range out.Tools {
		if tool.Name == name {
			return true
		}
	}
	return false
}

func waitListed(t *testing.T, api *rest.API, name string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !listed(t, api, name) {
		if time.Now().After(deadline) {
			t.Fatalf("%s not listed within 10s", name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The catalog keeps following the bucket across a restart of the NATS
// server (a KV watch alone would silently stop).
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
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := bus.EnsureAssets(ctx, js, bus.NewSubjects(""), bus.AssetOptions{}); err != nil {
		t.Fatal(err)
	}
	api, err := rest.New(ctx, nc, rest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Close)
	putCatalog(t, ns, "before")
	waitListed(t, api, "before__echo")

	ns.Stop()
	ns2, err := embednats.Start(ns.Options())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns2.Stop)
	putCatalog(t, ns2, "after")
	waitListed(t, api, "after__echo")
	if !listed(t, api, "before__echo") {
		t.Fatal("the stored catalog was lost")
	}
}
