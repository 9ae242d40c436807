package toolsearch_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/toolsearch"
)

func tool(server, name, desc, schema string) model.Tool {
	t := model.Tool{Name: server + "__" + name, Server: server, Tool: name, Description: desc}
	if schema != "" {
		t.InputSchema = json.RawMessage(schema)
	}
	return t
}

func names(hits []toolsearch.Hit) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.Tool.Name
	}
	return out
}

func fsTools() []model.Tool {
	return []model.Tool{
		tool("fs", "read_text_file", "Read the complete contents of a file as text.", `{"type":"object","properties":{"path":{"type":"string"}}}`),
		tool("fs", "write_file", "Create a new file or overwrite an existing file.", `{"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"}}}`),
		tool("fs", "list_directory", "Get a listing of all files and directories in a path.", ""),
		tool("fs", "move_file", "Move or rename files and directories.", `{"type":"object","properties":{"source":{"type":"string"},"destination":{"type":"string"}}}`),
	}
}

func TestSearchRanksByNameDescriptionAndParams(t *testing.T) {
	x := toolsearch.New()
	x.Replace("fs", fsTools())
	x.Replace("web", []model.Tool{
		tool("web", "fetch", "Fetch a URL and return its body.", `{"type":"object","properties":{"url":{"type":"string","description":"the address to download"}}}`),
	})
	for query, want := range map[string]string{
		"read a file":              "fs__read_text_file",
		"write file":               "fs__write_file",
		"rename":                   "fs__move_file",
		"list directories":         "fs__list_directory",
		"download":                 "web__fetch", // only in a parameter's description
		"destination":              "fs__move_file",
		"ListDirectory":            "fs__list_directory",
		"how do I fetch a webpage": "web__fetch",
	} {
		hits := x.Search(query, 3, nil)
		if len(hits) == 0 || hits[0].Tool.Name != want {
			t.Errorf("Search(%q) = %v, want %s first", query, names(hits), want)
		}
	}
	if hits := x.Search("the of a", 5, nil); len(hits) != 0 {
		t.Errorf("a query of stopwords found %v", names(hits))
	}
	if hits := x.Search("file", 2, nil); len(hits) != 2 {
		t.Errorf("limit 2 gave %d hits", len(hits))
	}
	if hits := x.Search("file", 0, nil); hits != nil {
		t.Errorf("limit 0 gave %v", names(hits))
	}
}

func TestSearchFiltersByVisibility(t *testing.T) {
	x := toolsearch.New()
	x.Replace("fs", fsTools())
	onlyMove := func(t *model.Tool) bool { return t.Name == "fs__move_file" }
	hits := x.Search("file", 10, onlyMove)
	if len(hits) != 1 || hits[0].Tool.Name != "fs__move_file" {
		t.Fatalf("visible filter: got %v", names(hits))
	}
	// The limit counts visible tools only: hidden better matches do not use it up.
	hits = x.Search("read file", 1, func(t *model.Tool) bool { return t.Name != "fs__read_text_file" })
	if len(hits) != 1 || hits[0].Tool.Name == "fs__read_text_file" {
		t.Fatalf("hidden tool returned or limit used up: %v", names(hits))
	}
}

func TestReplaceIsPerServer(t *testing.T) {
	x := toolsearch.New()
	x.Replace("fs", fsTools())
	x.Replace("web", []model.Tool{tool("web", "fetch", "Fetch a URL.", "")})
	if x.Len() != 5 {
		t.Fatalf("Len = %d, want 5", x.Len())
	}
	x.Replace("fs", []model.Tool{tool("fs", "search_files", "Search files by pattern.", "")})
	if x.Len() != 2 {
		t.Fatalf("after replacing fs: Len = %d, want 2", x.Len())
	}
	if hits := x.Search("move rename", 5, nil); len(hits) != 0 {
		t.Errorf("replaced tools still found: %v", names(hits))
	}
	if hits := x.Search("fetch url", 5, nil); len(hits) != 1 || hits[0].Tool.Name != "web__fetch" {
		t.Errorf("other server's tools lost: %v", names(hits))
	}
	x.Remove("web")
	if hits := x.Search("fetch", 5, nil); len(hits) != 0 || x.Len() != 1 {
		t.Errorf("removed server still found: %v (Len %d)", names(hits), x.Len())
	}
}

func TestSyncReplacesOnlyChangedServers(t *testing.T) {
	x := toolsearch.New()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cats := map[string]model.Catalog{
		"fs":  {Server: "fs", Tools: fsTools(), UpdatedAt: at},
		"web": {Server: "web", Tools: []model.Tool{tool("web", "fetch", "Fetch a URL.", "")}, UpdatedAt: at},
	}
	x.Sync(cats)
	if x.Len() != 5 {
		t.Fatalf("Len = %d, want 5", x.Len())
	}
	// Same stamp, different content: Sync trusts the stamp and keeps the old tools.
	cats["web"] = model.Catalog{Server: "web", Tools: []model.Tool{tool("web", "scrape", "Scrape.", "")}, UpdatedAt: at}
	x.Sync(cats)
	if hits := x.Search("fetch", 5, nil); len(hits) != 1 {
		t.Fatalf("unchanged stamp re-indexed web: %v", names(hits))
	}
	cats["web"] = model.Catalog{Server: "web", Tools: []model.Tool{tool("web", "scrape", "Scrape.", "")}, UpdatedAt: at.Add(time.Second)}
	delete(cats, "fs")
	x.Sync(cats)
	if hits := x.Search("scrape fetch file", 5, nil); len(hits) != 1 || hits[0].Tool.Name != "web__scrape" {
		t.Fatalf("after sync: %v", names(hits))
	}
}

func TestConcurrentReplaceAndSearch(t *testing.T) {
	x := toolsearch.New()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			x.Replace(fmt.Sprintf("s%d", i%5), fsTools())
		}
	}()
	for range 200 {
		for _, h := range x.Search("file", 5, nil) {
			if !strings.HasPrefix(h.Tool.Name, "fs__") {
				t.Fatalf("bad hit %v", h.Tool.Name)
			}
		}
	}
	<-done
}
