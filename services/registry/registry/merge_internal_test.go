package registry

import (
	"fmt"
	"slices"
	"testing"
)

func TestNameKey(t *testing.T) {
	cases := []struct{ name, owner, base string }{
		{"io.github.owner/github-mcp", "owner", "github"},
		{"@owner/github", "owner", "github"},
		{"io.github.domdomegg/airtable-mcp-server", "domdomegg", "airtable"},
		{"exa", "", "exa"},
		{"smithery-ai/fetch", "smithery", "fetch"},
		{"ai.smithery/fetch", "smithery", "fetch"},
		{"@jlia0/servers", "jlia0", "servers"},
		{"io.github.modelcontextprotocol/server-filesystem", "modelcontextprotocol", "filesystem"},
		{"com.example/mcp", "example", "mcp"},
	}
	for _, c := range cases {
		owner, base := nameKey(c.name)
		if owner != c.owner || base != c.base {
			t.Errorf("nameKey(%q) = (%q, %q), want (%q, %q)", c.name, owner, base, c.owner, c.base)
		}
	}
}

func TestMergeRules(t *testing.T) {
	off := []candidate{
		{source: "official", pos: 0, name: "io.github.acme/github-mcp", verified: true},
		{source: "official", pos: 1, name: "io.github.other/github", verified: true},
		{source: "official", pos: 2, name: "io.github.exa-labs/exa-mcp-server", verified: true},
	}
	smi := []candidate{
		{source: "smithery", pos: 0, name: "@acme/github", useCount: 10},
		{source: "smithery", pos: 1, name: "@third/github", useCount: 5}, // two official owners: no guess
		{source: "smithery", pos: 2, name: "exa", useCount: 700},         // no owner: the only exa
	}
	out := mergeRank("github", off, smi)
	got := map[string][]string{}
	for _, r := range out {
		got[r.Name+"|"+r.QualifiedName] = r.Sources
	}
	want := map[string][]string{
		"io.github.acme/github-mcp|@acme/github": {"official", "smithery"},
		"io.github.other/github|":                {"official"},
		"io.github.exa-labs/exa-mcp-server|exa":  {"official", "smithery"},
		"@third/github|@third/github":            {"smithery"},
	}
	if len(got) != len(want) {
		t.Fatalf("merged into %v", got)
	}
	for k, v := range want {
		if !slices.Equal(got[k], v) {
			t.Errorf("%s: sources %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	// Verified (all merged ones are) by use count, then the unverified.
	if out[0].QualifiedName != "exa" || out[1].QualifiedName != "@acme/github" || out[3].Name != "@third/github" {
		t.Fatalf("rank: %+v", out)
	}
	// The same Smithery hit never merges twice.
	out = mergeRank("x", off[:1], []candidate{{source: "smithery", name: "@acme/github"}, {source: "smithery", pos: 1, name: "@acme/github-mcp"}})
	if len(out) != 2 {
		t.Fatalf("one official takes one Smithery hit: %+v", out)
	}
}

// candidates makes n hits per source with overlapping names, counts and
// descriptions.
func candidates(n int) (off, smi []candidate) {
	for i := range n {
		off = append(off, candidate{
			source: "official", pos: i, name: fmt.Sprintf("io.github.owner%d/tool-%d-mcp", i%50, i),
			title: fmt.Sprintf("Tool %d", i), description: "A tool for searching things", verified: true,
		})
		smi = append(smi, candidate{
			source: "smithery", pos: i, name: fmt.Sprintf("@owner%d/tool-%d", (i+7)%50, i*3),
			title: fmt.Sprintf("Tool %d", i*3), description: "Searching made simple", verified: i%3 == 0, useCount: int64((i * 7919) % 1000),
		})
	}
	return off, smi
}

func BenchmarkMergeRank1000(b *testing.B) {
	off, smi := candidates(500)
	b.ReportAllocs()
	for b.Loop() {
		if out := mergeRank("tool search", off, smi); len(out) < 500 {
			b.Fatal(len(out))
		}
	}
}

// An owner-less Smithery name (exa) is a vendor's product: it merges only
// with the official entry the vendor publishes (ai.exa/…, io.github.exa-labs/…),
// never with whoever published the only official entry of that base name —
// which would lend that entry the Smithery server's name, rank and use count,
// and install the publisher's package from the row people chose as "exa".
func TestOwnerlessSmitheryNameMergesOnlyWithItsVendor(t *testing.T) {
	smi := []candidate{{source: "smithery", name: "exa", useCount: 700}}
	for _, c := range []struct {
		official string
		merged   bool
	}{
		{"io.github.exa-labs/exa-mcp-server", true},
		{"ai.exa/exa", true},
		{"io.github.attacker/exa", false},
		{"com.example/exa-mcp", false},
	} {
		out := mergeRank("exa", []candidate{{source: "official", name: c.official, verified: true}}, smi)
		if merged := len(out) == 1; merged != c.merged {
			t.Errorf("%s and Smithery's exa: merged %v, want %v (%+v)", c.official, merged, c.merged, out)
		}
	}
}
