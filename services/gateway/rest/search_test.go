package rest_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
	"github.com/mcpbus/mcpbus/services/gateway/rest"
)

// GET /api/v1/tools/search ranks the catalog it follows and shows a key
// only the tools its filter allows.
func TestSearchTools(t *testing.T) {
	ns, err := embednats.Start(embednats.Options{Port: -1, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	nc, err := ns.Connect()
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
	kv, err := js.KeyValue(ctx, bus.BucketTools)
	if err != nil {
		t.Fatal(err)
	}
	for slug, tools := range map[string][]model.Tool{
		"fs": {{Name: "fs__read_file", Server: "fs", Tool: "read_file", Description: "Read the contents of a file"},
			{Name: "fs__write_file", Server: "fs", Tool: "write_file", Description: "Write a file", InputSchema: json.RawMessage(`{"type":"object","properties":{"content":{"type":"string"}}}`)}},
		"web": {{Name: "web__fetch", Server: "web", Tool: "fetch", Title: "Fetch", Description: "Download a URL, or read a remote file"}},
	} {
		data, _ := json.Marshal(model.Catalog{Server: slug, Tools: tools, UpdatedAt: time.Now()})
		if _, err := kv.Put(ctx, slug, data); err != nil {
			t.Fatal(err)
		}
	}
	api, err := rest.New(ctx, nc, rest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Close)
	var h http.Handler
	for _, r := range api.Routes() {
		if r.Method == "GET" && r.Pattern == "/api/v1/tools/search" {
			h = r.Handler()
		}
	}
	search := func(p *auth.Principal, query string) (int, []byte) {
		req := httptest.NewRequest("GET", "/api/v1/tools/search?"+query, nil)
		req = req.WithContext(auth.WithPrincipal(req.Context(), p))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code, w.Body.Bytes()
	}
	names := func(body []byte) []string {
		var out rest.ToolsSearchReply
		if err := json.Unmarshal(body, &out); err != nil {
			t.Fatal(err)
		}
		var n []string
		for _, tool := range out.Tools {
			if tool.Score <= 0 || len(tool.Parameters) == 0 {
				t.Errorf("incomplete hit %+v", tool)
			}
			n = append(n, tool.Name)
		}
		return n
	}

	admin := auth.Anonymous()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := search(admin, "q=read+a+file")
		if got := names(body); code == http.StatusOK && len(got) == 3 && got[0] == "fs__read_file" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("search read a file: %d %s", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, body := search(admin, "q=read+a+file&limit=1"); len(names(body)) != 1 {
		t.Errorf("limit=1: %s", body)
	}
	webOnly := &auth.Principal{KeyID: "k1", Scopes: []string{auth.ScopeCall}, Tools: model.ToolFilter{Allow: []string{"web__*"}}}
	if code, body := search(webOnly, "q=read+a+file"); code != http.StatusOK || len(names(body)) != 1 || names(body)[0] != "web__fetch" {
		t.Errorf("a key allowed web__* only: %d %s", code, body)
	}
	for query, field := range map[string]string{"": "q", "q=+": "q", "q=x&limit=0": "limit", "q=x&limit=abc": "limit", "q=x&limit=500": "limit"} {
		code, body := search(admin, query)
		var e apierr.Error
		if code != http.StatusBadRequest || json.Unmarshal(body, &e) != nil || e.Field != field {
			t.Errorf("?%s: %d %s, want 400 about %s", query, code, body, field)
		}
	}
}
