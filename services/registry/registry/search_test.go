package registry_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/registry/registry"
	"github.com/mcpbus/mcpbus/services/registry/registrytest"
)

func TestSearchMergesAndRanks(t *testing.T) {
	e := start(t, setup{})
	r := e.search(t, model.RegistrySearchRequest{Query: "acme"})
	// io.github.acme/github-mcp (official) and @acme/github (Smithery) are one
	// server; @acme/github-gist is another.
	gh := find(r.Results, "io.github.acme/github-mcp")
	if gh == nil {
		t.Fatalf("merged GitHub result missing: %v", names(r.Results))
	}
	if !slices.Equal(gh.Sources, []string{"official", "smithery"}) || gh.QualifiedName != "@acme/github" {
		t.Fatalf("merge: sources %v qualified %q", gh.Sources, gh.QualifiedName)
	}
	if gh.UseCount != 5120 || !gh.Verified || gh.Version != "0.3.0" || gh.Title != "GitHub" {
		t.Fatalf("merged fields: %+v", gh)
	}
	gist := find(r.Results, "@acme/github-gist")
	if gist == nil || !slices.Equal(gist.Sources, []string{"smithery"}) || gist.Name != "@acme/github-gist" || gist.QualifiedName != "@acme/github-gist" {
		t.Fatalf("gist: %+v", gist)
	}
	// Verified first (the official listing counts), then by use count; the
	// unverified gist comes last.
	want := []string{"io.github.acme/github-mcp", "@acme/weather", "com.example/acme-analytics", "@acme/github-gist"}
	if !slices.Equal(names(r.Results), want) {
		t.Fatalf("order: got %v, want %v", names(r.Results), want)
	}
	if r.Total != 4 || r.HasMore || len(r.Warnings) != 0 || r.Stale {
		t.Fatalf("reply: %+v", r)
	}
	// A result names the request of its install plan: the official entry
	// when there is one, else the Smithery one.
	if g := gh.GetRequest(); g.Name != "io.github.acme/github-mcp" || g.Registry != "official" {
		t.Fatalf("GetRequest of a merged result: %+v", g)
	}
	weather := find(r.Results, "@acme/weather").GetRequest()
	if weather.Name != "@acme/weather" || weather.Registry != "smithery" {
		t.Fatalf("GetRequest of a Smithery result: %+v", weather)
	}
	if plan := e.get(t, weather); plan.Name != "@acme/weather" || !plan.Ready {
		t.Fatalf("plan of a search result: %+v", plan)
	}
}

func TestSearchOrderIsVerifiedThenPopularThenRelevantAndStable(t *testing.T) {
	e := start(t, setup{})
	// "e" matches nearly everything of both sources.
	first := e.search(t, model.RegistrySearchRequest{Query: "e", PageSize: 100})
	if len(first.Results) < 15 {
		t.Fatalf("want a broad result, got %v", names(first.Results))
	}
	for i := 1; i < len(first.Results); i++ {
		a, b := first.Results[i-1], first.Results[i]
		if !a.Verified && b.Verified {
			t.Fatalf("unverified %s before verified %s", a.Name, b.Name)
		}
		if a.Verified == b.Verified && a.UseCount < b.UseCount {
			t.Fatalf("%s (%d uses) before %s (%d uses)", a.Name, a.UseCount, b.Name, b.UseCount)
		}
	}
	if first.Results[0].Name != "exa" {
		t.Fatalf("the verified, most used server comes first: %v", names(first.Results))
	}
	for range 3 {
		again := e.search(t, model.RegistrySearchRequest{Query: "e", PageSize: 100})
		if !slices.Equal(names(again.Results), names(first.Results)) {
			t.Fatalf("order changed:\n%v\n%v", names(first.Results), names(again.Results))
		}
	}
	// Relevance orders what verification and popularity leave equal.
	r := e.search(t, model.RegistrySearchRequest{Query: "filesystem", Registry: "official"})
	if len(r.Results) == 0 || r.Results[0].Name != "io.github.modelcontextprotocol/filesystem" {
		t.Fatalf("filesystem: %v", names(r.Results))
	}
}

func TestSearchDropsInactiveAndOlderVersions(t *testing.T) {
	e := start(t, setup{})
	if r := e.search(t, model.RegistrySearchRequest{Query: "mcp-fs", Registry: "official"}); len(r.Results) != 0 {
		t.Fatalf("a deprecated entry is not offered: %v", names(r.Results))
	}
	r := e.search(t, model.RegistrySearchRequest{Query: "airtable", Registry: "official"})
	if len(r.Results) != 1 || r.Results[0].Version != "1.7.3" {
		t.Fatalf("only the latest version: %+v", r.Results)
	}
	if !strings.Contains(e.off.Queries()[0], "version=latest") {
		t.Fatalf("search asks for latest versions: %v", e.off.Queries())
	}
}

func TestSearchReadsSnakeCaseEntries(t *testing.T) {
	e := start(t, setup{})
	r := e.search(t, model.RegistrySearchRequest{Query: "brave", Registry: "official"})
	if len(r.Results) != 1 || r.Results[0].Name != "io.modelcontextprotocol.anonymous/brave-search" ||
		r.Results[0].Homepage != "https://anonymous.modelcontextprotocol.io/examples" {
		t.Fatalf("snake_case entry: %+v", r.Results)
	}
}

func TestSearchEmptyResult(t *testing.T) {
	e := start(t, setup{})
	r := e.search(t, model.RegistrySearchRequest{Query: "no-such-server-anywhere"})
	if r.Results == nil || len(r.Results) != 0 || r.Total != 0 || r.HasMore || len(r.Warnings) != 0 {
		t.Fatalf("empty: %+v", r)
	}
	raw, _ := json.Marshal(r)
	if !strings.Contains(string(raw), `"results":[]`) {
		t.Fatalf("results must be an empty array on the wire: %s", raw)
	}
}

func TestSearchPagesThroughTheMergedList(t *testing.T) {
	e := start(t, setup{})
	all := e.search(t, model.RegistrySearchRequest{Query: "e", PageSize: 100})
	var paged []string
	for page := 1; ; page++ {
		r := e.search(t, model.RegistrySearchRequest{Query: "e", Page: page, PageSize: 4})
		if r.Page != page || r.PageSize != 4 || r.Total != len(all.Results) {
			t.Fatalf("page %d: %+v", page, r)
		}
		paged = append(paged, names(r.Results)...)
		if !r.HasMore {
			if len(r.Results) == 0 || len(r.Results) > 4 {
				t.Fatalf("last page %d has %d results", page, len(r.Results))
			}
			break
		}
		if len(r.Results) != 4 {
			t.Fatalf("page %d has %d results", page, len(r.Results))
		}
	}
	if !slices.Equal(paged, names(all.Results)) {
		t.Fatalf("pages do not add up to the list:\n%v\n%v", paged, names(all.Results))
	}
	beyond := e.search(t, model.RegistrySearchRequest{Query: "e", Page: 50, PageSize: 4})
	if len(beyond.Results) != 0 || beyond.HasMore {
		t.Fatalf("beyond the end: %+v", beyond)
	}
}

func TestSearchOneSourceFailing(t *testing.T) {
	e := start(t, setup{})
	e.smi.SetFault(registrytest.Fault{Status: 503})
	r := e.search(t, model.RegistrySearchRequest{Query: "airtable"})
	if len(r.Results) != 1 || r.Results[0].Name != "io.github.domdomegg/airtable-mcp-server" {
		t.Fatalf("official results: %v", names(r.Results))
	}
	if len(r.Warnings) != 1 || r.Warnings[0].Source != "smithery" || r.Warnings[0].Code != string(apierr.ServiceUnavailable) ||
		!strings.Contains(r.Warnings[0].Message, "503") {
		t.Fatalf("warning: %+v", r.Warnings)
	}
}

func TestSearchMalformedJSON(t *testing.T) {
	e := start(t, setup{})
	e.off.SetFault(registrytest.Fault{Body: `{"servers": [{"server": {"name": 42`})
	r := e.search(t, model.RegistrySearchRequest{Query: "exa"})
	if len(r.Results) != 1 || r.Results[0].Name != "exa" {
		t.Fatalf("smithery results: %v", names(r.Results))
	}
	if len(r.Warnings) != 1 || r.Warnings[0].Source != "official" || !strings.Contains(r.Warnings[0].Message, "malformed JSON") {
		t.Fatalf("warning: %+v", r.Warnings)
	}
	// A malformed answer is never cached: once the registry is fixed it is asked again.
	e.off.SetFault(registrytest.Fault{})
	r = e.search(t, model.RegistrySearchRequest{Query: "exa"})
	if len(r.Warnings) != 0 {
		t.Fatalf("after the fix: %+v", r.Warnings)
	}
}

func TestSearchSlowSourceTimesOut(t *testing.T) {
	e := start(t, setup{opts: registry.Options{SourceTimeout: 300 * time.Millisecond}})
	e.off.SetFault(registrytest.Fault{Delay: 5 * time.Second})
	began := time.Now()
	r := e.search(t, model.RegistrySearchRequest{Query: "exa"})
	if took := time.Since(began); took > 2*time.Second {
		t.Fatalf("a slow source held the search for %v", took)
	}
	if len(r.Results) != 1 || r.Results[0].Name != "exa" {
		t.Fatalf("results: %v", names(r.Results))
	}
	if len(r.Warnings) != 1 || r.Warnings[0].Code != string(apierr.Network) || r.Warnings[0].Source != "official" {
		t.Fatalf("warning: %+v", r.Warnings)
	}
}

func TestSearchBothFailing(t *testing.T) {
	e := start(t, setup{opts: registry.Options{SourceTimeout: 300 * time.Millisecond}})
	e.off.SetFault(registrytest.Fault{Status: 500})
	e.smi.SetFault(registrytest.Fault{Status: 502})
	err := e.searchErr(t, model.RegistrySearchRequest{Query: "exa"})
	if err.Code != apierr.ServiceUnavailable || !strings.Contains(err.Message, "500") || !strings.Contains(err.Message, "502") {
		t.Fatalf("both 5xx: %v", err)
	}
	e.off.SetFault(registrytest.Fault{Delay: 5 * time.Second})
	e.smi.SetFault(registrytest.Fault{Delay: 5 * time.Second})
	if err := e.searchErr(t, model.RegistrySearchRequest{Query: "slow"}); err.Code != apierr.Network {
		t.Fatalf("both slow: %v", err)
	}
}

func TestSmitheryKeyAndUnauthorized(t *testing.T) {
	const key = "smithery-test-key-4f1d0c"
	// The service has no key; the fake Smithery demands one.
	e := start(t, setup{smitheryKey: key})
	err := e.searchErr(t, model.RegistrySearchRequest{Query: "exa", Registry: "smithery"})
	if err.Code != apierr.Unauthorized || !strings.Contains(err.Message, "Smithery") {
		t.Fatalf("smithery only: %v", err)
	}
	r := e.search(t, model.RegistrySearchRequest{Query: "airtable"})
	if len(r.Results) != 1 || len(r.Warnings) != 1 || r.Warnings[0].Code != string(apierr.Unauthorized) || r.Warnings[0].Source != "smithery" {
		t.Fatalf("both: %+v", r)
	}
	if err := e.getErr(t, model.RegistryGetRequest{Name: "exa", Registry: "smithery"}); err.Code != apierr.Unauthorized {
		t.Fatalf("get: %v", err)
	}

	// A second instance with the key gets answers; the key never shows.
	nc2, err2 := e.ns.Connect()
	if err2 != nil {
		t.Fatal(err2)
	}
	t.Cleanup(nc2.Close)
	e.run(t, nc2, registry.Options{Prefix: "keyed", OfficialURL: e.off.URL, SmitheryURL: e.smi.URL, SmitheryAPIKey: key,
		Logger: e.logger(), HasCommand: func(string) bool { return false }})
	out, err3 := registry.Search(context.Background(), e.nc, "keyed", model.RegistrySearchRequest{Query: "exa", Registry: "smithery"})
	if err3 != nil || len(out.Results) != 1 {
		t.Fatalf("with the key: %+v %v", out, err3)
	}
	plan, err4 := registry.Get(context.Background(), e.nc, "keyed", model.RegistryGetRequest{Name: "exa"})
	if err4 != nil {
		t.Fatal(err4)
	}
	raw, _ := json.Marshal([]any{out, plan})
	if strings.Contains(string(raw), key) || strings.Contains(e.log.String(), key) {
		t.Fatal("the Smithery key leaked into a reply or the log")
	}
}

func TestSearchCacheIsSharedAndFresh(t *testing.T) {
	e := start(t, setup{})
	e.search(t, model.RegistrySearchRequest{Query: "airtable"})
	offN, smiN := e.off.Requests(), e.smi.Requests()
	if offN == 0 || smiN == 0 {
		t.Fatal("the first search must ask both registries")
	}
	r := e.search(t, model.RegistrySearchRequest{Query: "airtable"})
	if e.off.Requests() != offN || e.smi.Requests() != smiN {
		t.Fatal("a fresh cache entry must answer the same search")
	}
	if r.Stale || len(r.Results) != 1 {
		t.Fatalf("cached reply: %+v", r)
	}
	// Another instance (another process in a deployment) shares the bucket.
	nc2, err := e.ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc2.Close)
	e.run(t, nc2, registry.Options{Prefix: "other", OfficialURL: e.off.URL, SmitheryURL: e.smi.URL, Logger: e.logger()})
	if _, err := registry.Search(context.Background(), e.nc, "other", model.RegistrySearchRequest{Query: "airtable"}); err != nil {
		t.Fatal(err)
	}
	if e.off.Requests() != offN || e.smi.Requests() != smiN {
		t.Fatal("the second instance must use the shared cache")
	}
	// A different query is not a cache hit.
	e.search(t, model.RegistrySearchRequest{Query: "exa"})
	if e.off.Requests() == offN {
		t.Fatal("another query must ask the registry")
	}
}

func TestStaleCacheServedWhenRegistryDown(t *testing.T) {
	e := start(t, setup{opts: registry.Options{CacheTTL: 200 * time.Millisecond}})
	e.search(t, model.RegistrySearchRequest{Query: "airtable"})
	e.get(t, model.RegistryGetRequest{Name: "io.github.domdomegg/airtable-mcp-server"})
	time.Sleep(300 * time.Millisecond)
	e.off.SetFault(registrytest.Fault{Status: 503})
	e.smi.SetFault(registrytest.Fault{Status: 503})
	before := e.off.Requests()
	r := e.search(t, model.RegistrySearchRequest{Query: "airtable"})
	if e.off.Requests() == before {
		t.Fatal("an expired entry must not answer without asking the registry")
	}
	if !r.Stale || len(r.Results) != 1 || !r.Results[0].Stale || r.Results[0].Name != "io.github.domdomegg/airtable-mcp-server" {
		t.Fatalf("stale reply: %+v", r)
	}
	if len(r.Warnings) != 2 || !strings.Contains(r.Warnings[0].Message+r.Warnings[1].Message, "cached results from") {
		t.Fatalf("warnings: %+v", r.Warnings)
	}
	plan := e.get(t, model.RegistryGetRequest{Name: "io.github.domdomegg/airtable-mcp-server"})
	if !plan.Stale || !plan.Ready {
		t.Fatalf("stale plan: %+v", plan)
	}
	// Nothing cached for this query: the registries' failure is the answer.
	if err := e.searchErr(t, model.RegistrySearchRequest{Query: "filesystem"}); err.Code != apierr.ServiceUnavailable {
		t.Fatalf("uncached: %v", err)
	}
	// An answer about the request (404) is not "down": no stale stand-in.
	e.off.SetFault(registrytest.Fault{Status: 404})
	if err := e.getErr(t, model.RegistryGetRequest{Name: "io.github.domdomegg/airtable-mcp-server"}); err.Code != apierr.NotFound {
		t.Fatalf("404: %v", err)
	}
}

func TestSearchBadInput(t *testing.T) {
	e := start(t, setup{})
	cases := []struct {
		req   model.RegistrySearchRequest
		field string
	}{
		{model.RegistrySearchRequest{Query: ""}, "query"},
		{model.RegistrySearchRequest{Query: "   "}, "query"},
		{model.RegistrySearchRequest{Query: strings.Repeat("a", 201)}, "query"},
		{model.RegistrySearchRequest{Query: "a\x00b"}, "query"},
		{model.RegistrySearchRequest{Query: "x", Registry: "npm"}, "registry"},
		{model.RegistrySearchRequest{Query: "x", PageSize: 101}, "page_size"},
		{model.RegistrySearchRequest{Query: "x", PageSize: -1}, "page_size"},
		{model.RegistrySearchRequest{Query: "x", Page: -1}, "page"},
		{model.RegistrySearchRequest{Query: "x", Page: 11, PageSize: 100}, "page"},
	}
	for _, c := range cases {
		err := e.searchErr(t, c.req)
		if err.Code != apierr.Validation || err.Field != c.field {
			t.Errorf("%+v: got %v, want VALIDATION_ERROR on %s", c.req, err, c.field)
		}
	}
	// Exactly 200 characters is fine.
	e.search(t, model.RegistrySearchRequest{Query: strings.Repeat("a", 200)})
	before := e.off.Requests() + e.smi.Requests()
	// Unknown fields are refused too.
	msg := []byte(`{"query":"x","registery":"official"}`)
	reply, err := e.nc.Request("mcp.v1.registry.search", msg, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if ae, ok := apierr.Parse(reply.Data); !ok || ae.Code != apierr.Validation {
		t.Fatalf("unknown field: %s", reply.Data)
	}
	for _, c := range cases {
		e.searchErr(t, c.req)
	}
	if e.off.Requests()+e.smi.Requests() != before {
		t.Fatal("bad input must not reach a registry")
	}
}

// generated returns n entries of the airtable entry's shape with numbered names.
func generated(t testing.TB, n int) []json.RawMessage {
	t.Helper()
	sample, err := registrytest.LoadOfficial("../testdata/official-sample.json")
	if err != nil {
		t.Fatal(err)
	}
	var tmpl map[string]any
	if err := json.Unmarshal(sample[0], &tmpl); err != nil {
		t.Fatal(err)
	}
	out := make([]json.RawMessage, n)
	for i := range n {
		server := tmpl["server"].(map[string]any)
		server["name"] = fmt.Sprintf("io.github.user%05d/tool-%05d", i, i)
		server["description"] = fmt.Sprintf("Generated tool number %d.", i)
		raw, err := json.Marshal(tmpl)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = raw
	}
	return out
}

func TestTenThousandEntryListing(t *testing.T) {
	// The deep page walks ten registry pages within one SourceTimeout; under
	// a loaded machine's -race the default 5 s was not enough (a partial walk
	// answers with a warning, checked below), so this test allows what the
	// bus request itself waits, less a second.
	e := start(t, setup{official: generated(t, 10000), opts: registry.Options{SourceTimeout: registry.RequestTimeout - time.Second}})
	// The client follows the cursor through the whole listing.
	c, err := registry.NewOfficialClient(e.off.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	cursor, pages := "", 0
	for {
		l, err := c.List(context.Background(), registry.ListParams{Limit: 100, Cursor: cursor, Version: "latest"})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, s := range l.Servers {
			if seen[s.Server.Name] {
				t.Fatalf("%s listed twice", s.Server.Name)
			}
			seen[s.Server.Name] = true
		}
		if l.NextCursor == "" {
			break
		}
		cursor = l.NextCursor
	}
	if len(seen) != 10000 || pages != 100 {
		t.Fatalf("walked %d entries in %d pages", len(seen), pages)
	}
	// A deep page of the search walks the registry's pages up to its window.
	before := e.off.Requests()
	r := e.search(t, model.RegistrySearchRequest{Query: "tool", Registry: "official", Page: 10, PageSize: 100})
	if len(r.Results) != 100 || !r.HasMore || r.Total != 1000 || len(r.Warnings) != 0 {
		t.Fatalf("page 10: %d results, has_more %v, total %d, warnings %+v", len(r.Results), r.HasMore, r.Total, r.Warnings)
	}
	if r.Results[0].Name != "io.github.user00900/tool-00900" || r.Results[99].Name != "io.github.user00999/tool-00999" {
		t.Fatalf("page 10 spans %s … %s", r.Results[0].Name, r.Results[99].Name)
	}
	if n := e.off.Requests() - before; n != 10 {
		t.Fatalf("page 10 took %d registry requests, want 10", n)
	}
	// Updated-since filtering is passed through.
	l, err := c.List(context.Background(), registry.ListParams{Limit: 5, UpdatedSince: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)})
	if err != nil || len(l.Servers) != 0 {
		t.Fatalf("updated_since in the future: %+v %v", l, err)
	}
}

// A registry's search answer is shown in terminals (mcpbus search) and read
// by other programs: a name that no get would accept (escape sequences, a
// command line) is dropped, links are http(s) only, and text carries no
// control characters.
func TestSearchDropsHostileHits(t *testing.T) {
	e := start(t, setup{})
	entry := func(name, version, website string) map[string]any {
		return map[string]any{"server": map[string]any{
			"name": name, "version": version, "description": "evil\x1b]52;c;ZWNobyBwd25lZA==\x07 text", "websiteUrl": website,
		}}
	}
	list, _ := json.Marshal(map[string]any{"servers": []any{
		entry("io.github.evil/\x1b[2J\x1b[Hfake", "1.0.0", "https://example.com"),
		entry("io.github.evil/ok-evil", "1.0.0\x1b[31m", "javascript:alert(document.cookie)"),
		entry("io.github.evil/ok-evil2", "2.0.0", "https://evil.example.com/home"),
	}, "metadata": map[string]any{"count": 3}})
	e.off.SetFault(registrytest.Fault{Body: string(list)})
	rows, _ := json.Marshal(map[string]any{"servers": []any{
		map[string]any{"qualifiedName": "@evil/\x1b[31mred", "displayName": "Red"},
		map[string]any{"qualifiedName": "@evil/icon", "displayName": "Icon\x1b[0m", "iconUrl": "javascript:alert(1)", "homepage": "data:text/html,<script>alert(1)</script>"},
		map[string]any{"qualifiedName": "@evil/icon2", "iconUrl": "https://cdn.example.com/i.png", "homepage": "http://example.org/"},
	}, "pagination": map[string]any{"currentPage": 1, "totalPages": 1}})
	e.smi.SetFault(registrytest.Fault{Body: string(rows)})

	r := e.search(t, model.RegistrySearchRequest{Query: "evil"})
	raw, _ := json.Marshal(r)
	if strings.Contains(string(raw), `\u001b`) || strings.Contains(string(raw), `\u0007`) {
		t.Fatalf("control characters in the reply: %s", raw)
	}
	got := names(r.Results)
	slices.Sort(got)
	if want := []string{"@evil/icon", "@evil/icon2", "io.github.evil/ok-evil", "io.github.evil/ok-evil2"}; !slices.Equal(got, want) {
		t.Fatalf("results %q, want %q", got, want)
	}
	if h := find(r.Results, "io.github.evil/ok-evil"); h.Homepage != "" {
		t.Errorf("javascript: homepage kept: %q", h.Homepage)
	}
	if h := find(r.Results, "@evil/icon"); h.IconURL != "" || h.Homepage != "" {
		t.Errorf("javascript:/data: links kept: %+v", h)
	}
	if h := find(r.Results, "io.github.evil/ok-evil2"); h.Homepage != "https://evil.example.com/home" {
		t.Errorf("https homepage lost: %+v", h)
	}
	if h := find(r.Results, "@evil/icon2"); h.IconURL != "https://cdn.example.com/i.png" || h.Homepage != "http://example.org/" {
		t.Errorf("http(s) links lost: %+v", h)
	}
}

// A registry whose cursor goes round (A, B, A, …) or whose pages repeat the
// same servers ends the walk at once instead of asking until the timeout.
func TestSearchCursorCycleEnds(t *testing.T) {
	e := start(t, setup{opts: registry.Options{SourceTimeout: 10 * time.Second}})
	// The cursor goes a, b, a, b … and every page lists the same server.
	e.off.SetFault(registrytest.Fault{Respond: func(w http.ResponseWriter, r *http.Request) {
		next := "a"
		if r.URL.Query().Get("cursor") == "a" {
			next = "b"
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"servers": []any{map[string]any{"server": map[string]any{
			"name": "io.github.loop/server", "version": "1.0.0"}}}, "metadata": map[string]any{"nextCursor": next, "count": 1}})
	}})
	began := time.Now()
	r := e.search(t, model.RegistrySearchRequest{Query: "loop", Registry: model.RegistryOfficial})
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("the walk took %v", took)
	}
	if len(r.Results) != 1 {
		t.Fatalf("results: %v", names(r.Results))
	}
	if n := e.off.Requests(); n > 3 {
		t.Fatalf("the registry was asked %d times for a looping cursor", n)
	}
	// Smithery: every page number answered with the same full page.
	rows := make([]any, 0, 100)
	for i := range 100 {
		rows = append(rows, map[string]any{"qualifiedName": fmt.Sprintf("@loop/s%d", i)})
	}
	b, _ := json.Marshal(map[string]any{"servers": rows, "pagination": map[string]any{"totalPages": 1000000}})
	e.smi.SetFault(registrytest.Fault{Body: string(b)})
	r = e.search(t, model.RegistrySearchRequest{Query: "loop", Registry: model.RegistrySmithery, Page: 2, PageSize: 100})
	if n := e.smi.Requests(); n > 3 {
		t.Fatalf("smithery was asked %d times for pages that repeat", n)
	}
	if len(r.Results) != 0 || r.HasMore {
		t.Fatalf("page 2 of a repeating listing: %v more=%v", names(r.Results), r.HasMore)
	}
}

// A registry answering 429 is RATE_LIMITED with seeds/002 §11.1's "Rate
// limited. Try again in X seconds." when it says when (Retry-After); the
// other registry's results still come.
func TestSearchRateLimited(t *testing.T) {
	e := start(t, setup{})
	e.smi.SetFault(registrytest.Fault{Respond: func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "7")
		w.WriteHeader(http.StatusTooManyRequests)
	}})
	r := e.search(t, model.RegistrySearchRequest{Query: "airtable"})
	if len(r.Results) != 1 || len(r.Warnings) != 1 || r.Warnings[0].Source != "smithery" ||
		r.Warnings[0].Code != string(apierr.RateLimited) || !strings.Contains(r.Warnings[0].Message, "Rate limited. Try again in 7 seconds.") {
		t.Fatalf("smithery rate limited: %+v", r)
	}
	e.off.SetFault(registrytest.Fault{Status: http.StatusTooManyRequests}) // no Retry-After
	err := e.searchErr(t, model.RegistrySearchRequest{Query: "exa", Registry: "official"})
	if err.Code != apierr.RateLimited || !strings.Contains(err.Message, "Rate limited. Try again later.") {
		t.Fatalf("official rate limited: %v", err)
	}
}
