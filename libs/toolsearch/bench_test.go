package toolsearch_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/toolsearch"
)

// synthetic is a catalog of n tools over 100 servers, their names and
// descriptions drawn from a fixed vocabulary (seeded: the same every run).
func synthetic(n int) map[string][]model.Tool {
	verbs := strings.Fields("get list create update delete search read write move copy send fetch run start stop sync export import query render")
	nouns := strings.Fields("file directory issue pull_request commit branch repository user message channel email calendar event ticket invoice customer order product image document table row record database query job pipeline metric alert log dashboard bucket object secret key token page comment label")
	words := strings.Fields("the a an of for with from into by returns given optional required list id name path content filter limit page status owner date time range format json text value")
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(list []string) string { return list[rng.IntN(len(list))] }
	out := map[string][]model.Tool{}
	for i := range n {
		srv := fmt.Sprintf("srv%02d", i%100)
		name := fmt.Sprintf("%s_%s_%d", pick(verbs), pick(nouns), i)
		var d []string
		for range 12 + rng.IntN(20) {
			d = append(d, pick(words), pick(nouns))
		}
		schema := fmt.Sprintf(`{"type":"object","properties":{"%s":{"type":"string","description":"the %s %s"},"%s":{"type":"integer"}}}`,
			pick(nouns), pick(words), pick(nouns), pick(words))
		out[srv] = append(out[srv], model.Tool{Name: srv + "__" + name, Server: srv, Tool: name,
			Description: strings.Join(d, " "), InputSchema: []byte(schema)})
	}
	return out
}

// BenchmarkSearch10k times one query over 10,000 tools, with a visibility
// predicate as an agent's allow list applies; it reports the median and
// 99th percentile of the single queries besides the mean (ns/op).
func BenchmarkSearch10k(b *testing.B) {
	x := toolsearch.New()
	for srv, tools := range synthetic(10_000) {
		x.Replace(srv, tools)
	}
	queries := []string{"create issue", "list files in a directory", "send an email message to a customer",
		"delete the database row", "export metrics dashboard", "search pull requests by owner", "fetch page content"}
	visible := func(t *model.Tool) bool { return !strings.HasPrefix(t.Server, "srv9") }
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		if len(x.Search(queries[i%len(queries)], 10, visible)) == 0 {
			b.Fatal("no hits")
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkReplaceServer times replacing one server's 100 tools in a
// 10,000-tool index (what a catalog change costs).
func BenchmarkReplaceServer(b *testing.B) {
	x := toolsearch.New()
	cat := synthetic(10_000)
	for srv, tools := range cat {
		x.Replace(srv, tools)
	}
	for b.Loop() {
		x.Replace("srv42", cat["srv42"])
	}
}
