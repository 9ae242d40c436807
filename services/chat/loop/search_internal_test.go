package loop

import (
	"encoding/json"
	"fmt"
	"hash/maphash"
	"testing"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/toolsearch"
)

// BenchmarkIndexCatalogUnchanged is what a search-mode step adds when the
// catalog did not change: hashing 10,000 tools (100 servers) to find that
// no server needs re-indexing.
func BenchmarkIndexCatalogUnchanged(b *testing.B) {
	schema := json.RawMessage(`{"type":"object","properties":{"path":{"type":"string","description":"the file to read"},"limit":{"type":"integer"}}}`)
	var all []model.Tool
	for s := range 100 {
		for i := range 100 {
			srv := fmt.Sprintf("server%d", s)
			all = append(all, model.Tool{Name: fmt.Sprintf("%s__read_thing_%d", srv, i), Server: srv, Tool: fmt.Sprintf("read_thing_%d", i),
				Description: "Reads one thing of the store by its path and returns its content, or an error when there is none.", InputSchema: schema})
		}
	}
	e := &Engine{search: toolsearch.New(), seed: maphash.MakeSeed()}
	e.indexCatalog(all)
	if e.search.Len() != len(all) {
		b.Fatalf("indexed %d of %d tools", e.search.Len(), len(all))
	}
	b.ReportAllocs()
	for b.Loop() {
		e.indexCatalog(all)
	}
}

// The index follows the catalog: a changed description is searched anew, a
// server gone is forgotten, an unchanged server keeps its stamp.
func TestIndexCatalogFollowsChanges(t *testing.T) {
	e := &Engine{search: toolsearch.New(), seed: maphash.MakeSeed()}
	cat := []model.Tool{
		{Name: "a__one", Server: "a", Description: "paint the fence"},
		{Name: "b__two", Server: "b", Description: "water the garden"},
	}
	e.indexCatalog(cat)
	stampB, _ := e.search.Stamp("b")
	if hits := e.search.Search("fence", 5, nil); len(hits) != 1 || hits[0].Tool.Name != "a__one" {
		t.Fatalf("fence: %+v", hits)
	}
	cat[0].Description = "mow the lawn"
	e.indexCatalog(cat)
	if hits := e.search.Search("fence", 5, nil); len(hits) != 0 {
		t.Fatalf("the old description is still found: %+v", hits)
	}
	if hits := e.search.Search("lawn", 5, nil); len(hits) != 1 {
		t.Fatalf("the new description is not found: %+v", hits)
	}
	if s, _ := e.search.Stamp("b"); s != stampB {
		t.Fatalf("server b was re-stamped without a change: %s -> %s", stampB, s)
	}
	e.indexCatalog(cat[:1])
	if _, ok := e.search.Stamp("b"); ok || len(e.search.Search("garden", 5, nil)) != 0 {
		t.Fatal("server b is still indexed after it left the catalog")
	}
}
