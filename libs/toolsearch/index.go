// Package toolsearch ranks the tools of a catalog against a free-text query
// (BM25 over name, title, description and parameters), so that a client
// offered thousands of tools can ask for the few it needs. The index is kept
// per server: one server's new tool list replaces its documents only.
package toolsearch

import (
	"math"
	"slices"
	"sync"

	"github.com/mcpbus/mcpbus/libs/model"
)

// BM25 parameters: the usual k1 and b.
const (
	k1 = 1.2
	b  = 0.75
)

// Field weights: a word of the tool's own name says more about what it does
// than one of its description (BM25F-style: weighted term frequencies and
// a weighted document length).
const (
	weightName   = 3
	weightTitle  = 2
	weightDesc   = 1
	weightParam  = 1
	weightServer = 1
)

// doc is one indexed tool; a nil tool marks a free slot.
type doc struct {
	tool   *model.Tool
	terms  []string // its distinct terms, to drop it from the postings
	length float64  // weighted token count
}

type server struct {
	stamp string
	ids   []int32
}

// posting is one document's weighted frequency of a term.
type posting struct {
	id int32
	tf float32
}

// Index is a BM25 index of tools, safe for concurrent use.
type Index struct {
	mu       sync.RWMutex
	docs     []doc
	free     []int32
	servers  map[string]server
	postings map[string][]posting // term -> the docs that hold it
	live     int
	totalLen float64
}

// New returns an empty index.
func New() *Index {
	return &Index{servers: map[string]server{}, postings: map[string][]posting{}}
}

// Len is the number of indexed tools.
func (x *Index) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.live
}

// Replace installs tools as the complete tool list of server.
func (x *Index) Replace(srv string, tools []model.Tool) { x.replace(srv, "", tools) }

// Remove drops every tool of server.
func (x *Index) Remove(srv string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.drop(srv)
}

// Sync brings the index in line with catalogs (server slug -> catalog):
// servers whose catalog changed (its updated_at, config revision or tool
// count) are replaced, servers absent are removed, the rest left as they are.
func (x *Index) Sync(catalogs map[string]model.Catalog) {
	x.Retain(func(srv string) bool { _, ok := catalogs[srv]; return ok })
	for slug, cat := range catalogs {
		x.SetServer(slug, stampOf(cat), cat.Tools)
	}
}

// SetServer replaces server's tools unless stamp is the one they were
// indexed under: a caller with its own notion of a version (a catalog's
// updated_at, a hash) re-indexes only what changed.
func (x *Index) SetServer(srv, stamp string, tools []model.Tool) {
	x.mu.RLock()
	s, ok := x.servers[srv]
	x.mu.RUnlock()
	if ok && s.stamp == stamp {
		return
	}
	x.replace(srv, stamp, tools)
}

// Stamp is the stamp server's tools were indexed under (false: none indexed).
func (x *Index) Stamp(srv string) (string, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	s, ok := x.servers[srv]
	return s.stamp, ok
}

// Retain removes every server keep refuses.
func (x *Index) Retain(keep func(server string) bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for srv := range x.servers {
		if !keep(srv) {
			x.drop(srv)
		}
	}
}

func stampOf(cat model.Catalog) string {
	return cat.UpdatedAt.String() + "/" + itoa(int(cat.ConfigRevision)) + "/" + itoa(len(cat.Tools))
}

func (x *Index) replace(srv, stamp string, tools []model.Tool) {
	// Terms are computed before the lock: readers wait only for the swap.
	type prepared struct {
		tool   *model.Tool
		tf     map[string]float64
		length float64
	}
	prep := make([]prepared, 0, len(tools))
	for i := range tools {
		t := tools[i]
		if t.Server == "" {
			t.Server = srv
		}
		tf, length := terms(&t)
		prep = append(prep, prepared{&t, tf, length})
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.drop(srv)
	s := server{stamp: stamp, ids: make([]int32, 0, len(prep))}
	for _, p := range prep {
		var id int32
		if n := len(x.free); n > 0 {
			id, x.free = x.free[n-1], x.free[:n-1]
		} else {
			id = int32(len(x.docs))
			x.docs = append(x.docs, doc{})
		}
		d := doc{tool: p.tool, length: p.length, terms: make([]string, 0, len(p.tf))}
		for term, f := range p.tf {
			d.terms = append(d.terms, term)
			x.postings[term] = append(x.postings[term], posting{id, float32(f)})
		}
		x.docs[id] = d
		s.ids = append(s.ids, id)
		x.live++
		x.totalLen += p.length
	}
	x.servers[srv] = s
}

// drop removes server's documents; x.mu is held. Each term the server's
// tools hold has its postings filtered once.
func (x *Index) drop(srv string) {
	s, ok := x.servers[srv]
	if !ok {
		return
	}
	delete(x.servers, srv)
	dropped := make([]bool, len(x.docs))
	affected := map[string]bool{}
	for _, id := range s.ids {
		dropped[id] = true
		d := x.docs[id]
		for _, term := range d.terms {
			affected[term] = true
		}
		x.live--
		x.totalLen -= d.length
		x.docs[id] = doc{}
		x.free = append(x.free, id)
	}
	for term := range affected {
		post := slices.DeleteFunc(x.postings[term], func(p posting) bool { return dropped[p.id] })
		if len(post) == 0 {
			delete(x.postings, term)
		} else {
			x.postings[term] = post
		}
	}
}

// Hit is one search result.
type Hit struct {
	Tool  model.Tool
	Score float64
}

// Search returns at most limit tools that visible accepts (nil: all),
// best first (ties by name). A query without a searchable word finds nothing.
func (x *Index) Search(query string, limit int, visible func(*model.Tool) bool) []Hit {
	if limit <= 0 {
		return nil
	}
	q := Tokens(query)
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.live == 0 || len(q) == 0 {
		return nil
	}
	avg := x.totalLen / float64(x.live)
	scores := make([]float32, len(x.docs))
	var touched []int32
	seen := map[string]bool{}
	for _, term := range q {
		if seen[term] {
			continue
		}
		seen[term] = true
		post := x.postings[term]
		if len(post) == 0 {
			continue
		}
		df := float64(len(post))
		idf := float32(math.Log(1 + (float64(x.live)-df+0.5)/(df+0.5)))
		for _, p := range post {
			norm := float32(k1 * (1 - b + b*x.docs[p.id].length/avg))
			if scores[p.id] == 0 {
				touched = append(touched, p.id)
			}
			scores[p.id] += idf * p.tf * (k1 + 1) / (p.tf + norm)
		}
	}
	// The best limit visible documents, kept sorted worst last; the
	// visibility predicate runs only for a document that would enter.
	better := func(a, c int32) bool {
		if scores[a] != scores[c] {
			return scores[a] > scores[c]
		}
		return x.docs[a].tool.Name < x.docs[c].tool.Name
	}
	top := make([]int32, 0, limit+1)
	for _, id := range touched {
		if len(top) == limit && !better(id, top[limit-1]) {
			continue
		}
		if visible != nil && !visible(x.docs[id].tool) {
			continue
		}
		at, _ := slices.BinarySearchFunc(top, id, func(e, t int32) int {
			if better(e, t) {
				return -1
			}
			return 1
		})
		top = slices.Insert(top, at, id)
		if len(top) > limit {
			top = top[:limit]
		}
	}
	out := make([]Hit, len(top))
	for i, id := range top {
		out[i] = Hit{Tool: *x.docs[id].tool, Score: float64(scores[id])}
	}
	return out
}
