package registry

import (
	"sort"
	"strings"

	"github.com/mcpbus/mcpbus/libs/model"
)

// candidate is one search hit of one source, before merging.
type candidate struct {
	source string
	// pos is the hit's rank in its source's answer (the source's relevance).
	pos         int
	name        string // official name or Smithery qualified name
	title       string
	description string
	version     string
	homepage    string
	iconURL     string
	verified    bool
	useCount    int64
	remote      bool
	stale       bool
}

// merged is a result with what ranking needs.
type merged struct {
	model.RegistryResult
	relevance int
	pos       int
}

// nameKey splits a registry name into a normalized owner and base name, so
// io.github.acme/github-mcp and @acme/github both give (acme, github).
func nameKey(name string) (owner, base string) {
	name = strings.ToLower(strings.TrimSpace(name))
	ns, last, found := strings.Cut(name, "/")
	if !found {
		last, ns = ns, ""
	}
	if i := strings.LastIndexByte(last, '/'); i >= 0 {
		last = last[i+1:]
	}
	ns = strings.TrimPrefix(ns, "@")
	switch {
	case strings.HasPrefix(ns, "io.github."):
		ns = strings.TrimPrefix(ns, "io.github.")
	case strings.Contains(ns, "."):
		// Reverse DNS (com.example, ai.smithery): the owner is the domain label.
		labels := strings.Split(ns, ".")
		ns = labels[1]
	}
	return normTokens(ns, ownerNoise), normTokens(last, baseNoise)
}

var (
	// baseNoise are words that every MCP server name repeats.
	baseNoise = map[string]bool{"mcp": true, "server": true}
	// ownerNoise are company suffixes (smithery-ai vs ai.smithery).
	ownerNoise = map[string]bool{"ai": true, "labs": true, "hq": true, "inc": true, "io": true, "dev": true, "app": true}
)

// normTokens lower-cases s, drops noise words and separators; when nothing
// is left it keeps all words.
func normTokens(s string, noise map[string]bool) string {
	words := strings.FieldsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
	})
	var b strings.Builder
	for _, w := range words {
		if !noise[w] {
			b.WriteString(w)
		}
	}
	if b.Len() == 0 {
		return strings.Join(words, "")
	}
	return b.String()
}

// mergeRank merges the hits of both sources (an official and a Smithery hit
// with the same base name and compatible owners become one result) and
// ranks them: verified first, then use count, then relevance to the query,
// then the sources' own order, then name. The order is total, so stable.
func mergeRank(query string, official, smithery []candidate) []model.RegistryResult {
	out := make([]*merged, 0, len(official)+len(smithery))
	byBase := make(map[string][]*officialSlot, len(official))
	for _, c := range official {
		owner, base := nameKey(c.name)
		m := newMerged(c)
		out = append(out, m)
		byBase[base] = append(byBase[base], &officialSlot{m: m, owner: owner})
	}
	for _, c := range smithery {
		owner, base := nameKey(c.name)
		if slot := matchOfficial(byBase[base], owner, base); slot != nil {
			slot.taken = true
			absorb(slot.m, c)
			continue
		}
		m := newMerged(c)
		out = append(out, m)
	}
	q := strings.ToLower(strings.TrimSpace(query))
	words := strings.Fields(q)
	for _, m := range out {
		m.relevance = relevance(q, words, &m.RegistryResult)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Verified != b.Verified {
			return a.Verified
		}
		if a.UseCount != b.UseCount {
			return a.UseCount > b.UseCount
		}
		if a.relevance != b.relevance {
			return a.relevance > b.relevance
		}
		if a.pos != b.pos {
			return a.pos < b.pos
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.QualifiedName < b.QualifiedName
	})
	results := make([]model.RegistryResult, len(out))
	for i, m := range out {
		results[i] = m.RegistryResult
	}
	return results
}

// officialSlot is an official hit a Smithery hit may merge into.
type officialSlot struct {
	m     *merged
	owner string
	taken bool
}

// matchOfficial picks the official hit a Smithery hit merges into: same base
// name, not merged yet, and the same owner — or, when one side names no
// owner, the only owner that base name has. An owner-less Smithery name
// (exa) is a vendor's product: it merges only with the vendor's own entry
// (owner exa: ai.exa/…, io.github.exa-labs/…), not with whoever published
// the only official entry of that base name, which would take the Smithery
// server's name, rank and use count, and be what installing the row runs.
func matchOfficial(slots []*officialSlot, owner, base string) *officialSlot {
	var only *officialSlot
	owners := 0
	seen := map[string]bool{}
	for _, s := range slots {
		if s.taken {
			continue
		}
		if owner != "" && s.owner == owner {
			return s
		}
		if !seen[s.owner] {
			seen[s.owner] = true
			owners++
		}
		if only == nil {
			only = s
		}
	}
	if only == nil || owners != 1 {
		return nil
	}
	switch {
	case owner == "":
		if only.owner == base {
			return only
		}
	case only.owner == "":
		return only
	}
	return nil
}

func newMerged(c candidate) *merged {
	m := &merged{pos: c.pos}
	m.Name = c.name
	m.Title = c.title
	m.Description = c.description
	m.Homepage = c.homepage
	m.IconURL = c.iconURL
	m.Verified = c.verified
	m.UseCount = c.useCount
	m.Remote = c.remote
	m.Stale = c.stale
	m.Sources = []string{c.source}
	if c.source == model.RegistryOfficial {
		m.Version = c.version
	} else {
		m.QualifiedName = c.name
	}
	return m
}

// absorb adds a Smithery hit to an official one.
func absorb(m *merged, c candidate) {
	m.QualifiedName = c.name
	m.Sources = append(m.Sources, c.source)
	m.Verified = m.Verified || c.verified
	m.UseCount = max(m.UseCount, c.useCount)
	m.Remote = m.Remote || c.remote
	m.Stale = m.Stale || c.stale
	m.pos = min(m.pos, c.pos)
	if m.Title == "" {
		m.Title = c.title
	}
	if m.Description == "" {
		m.Description = c.description
	}
	if m.Homepage == "" {
		m.Homepage = c.homepage
	}
	if m.IconURL == "" {
		m.IconURL = c.iconURL
	}
}

// relevance scores how well a result matches the query: the whole query as
// a name or title beats a prefix, beats a substring, beats a match in the
// description; each query word found adds a little.
func relevance(q string, words []string, r *model.RegistryResult) int {
	if q == "" {
		return 0
	}
	names := []string{strings.ToLower(r.Title)}
	for _, n := range []string{r.Name, r.QualifiedName} {
		if n == "" {
			continue
		}
		n = strings.ToLower(n)
		names = append(names, n)
		if i := strings.LastIndexByte(n, '/'); i >= 0 {
			names = append(names, n[i+1:])
		}
	}
	score := 0
	for _, n := range names {
		switch {
		case n == "":
		case n == q:
			score = max(score, 100)
		case strings.HasPrefix(n, q):
			score = max(score, 80)
		case strings.Contains(n, q):
			score = max(score, 60)
		}
	}
	desc := strings.ToLower(r.Description)
	if score == 0 && strings.Contains(desc, q) {
		score = 20
	}
	all := strings.Join(names, " ") + " " + desc
	for _, w := range words {
		if strings.Contains(all, w) {
			score += 2
		}
	}
	return score
}
