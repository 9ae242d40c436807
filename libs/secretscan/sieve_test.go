package secretscan

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// The walk finds the same with and without the vector sieve, on payloads
// long enough for its blocks: keywords (any case) at every offset of a
// block, across a block's edge, whitespace runs around the shortest known
// value's length, quotes, escapes and bytes beyond ASCII.
func TestSieveChangesNoFinding(t *testing.T) {
	s := testScanner(t)
	if !sieveAvailable() {
		t.Skip("no vector sieve in this build or on this CPU (GOEXPERIMENT=simd on amd64 with AVX-512)")
	}
	straight := *s.keywords
	straight.vector = false
	keywords := s.keywords.keywordList()
	// Sets whose shortest value has each length from the least to past
	// the walk's 63-byte mask, besides walkSets.
	sets := append(walkSets(), nil)
	for l := MinKnownLen; l <= 70; l++ {
		sets = append(sets, NewKnown([]byte("k"), []string{strings.Repeat("v", l), walkValues[0]}))
	}
	rnd := rand.New(rand.NewPCG(5, 6))
	hits := 0
	for i := range 20000 {
		var b strings.Builder
		for b.Len() < 65+rnd.IntN(400) {
			b.WriteString(walkPayload(rnd, keywords))
			if rnd.IntN(3) == 0 {
				b.WriteString(strings.Repeat(" \t\r\n"[rnd.IntN(4):][:1], rnd.IntN(3)) + strings.Repeat("v", rnd.IntN(75)))
			}
		}
		p := []byte(b.String())
		if i%7 == 0 { // a keyword at the edge of the first block
			k := keywords[rnd.IntN(len(keywords))]
			at := 64 - rnd.IntN(len(k)+1)
			if at >= 0 && at+len(k) <= len(p) {
				copy(p[at:], strings.ToUpper(k))
			}
		}
		known := sets[i%len(sets)]
		var wantHits, gotHits []hit
		wantSet, wantFound := straight.walk(p, &wantHits, known)
		gotSet, gotFound := s.keywords.walk(p, &gotHits, known)
		if gotSet != wantSet || !slices.Equal(gotHits, wantHits) {
			t.Fatalf("%q: keywords %s, want %s", p, hitWords(gotHits), hitWords(wantHits))
		}
		if !slices.Equal(gotFound, wantFound) {
			t.Fatalf("%q: known values at %v, want %v", p, gotFound, wantFound)
		}
		hits += len(gotHits) + len(gotFound)
	}
	if hits < 20000 {
		t.Fatalf("only %d keyword occurrences and known values in 20000 payloads", hits)
	}
}

// Every keyword's pairs are in the sieve's sets: none is sieved out.
func TestSieveKeepsEveryKeyword(t *testing.T) {
	s := testScanner(t)
	ss := s.keywords.sieve
	in := func(set *pairSet, a, b byte) bool {
		// Either case of each byte.
		return ss.has(set, a, b) && ss.has(set, upper(a), b) && ss.has(set, a, upper(b)) && ss.has(set, upper(a), upper(b))
	}
	for _, w := range s.keywords.keywordList() {
		var ok bool
		if len(w) < 4 {
			ok = in(&ss.shorts, w[0], w[1])
		} else {
			ok = in(&ss.firsts, w[0], w[1]) && in(&ss.seconds, w[1], w[2]) && in(&ss.thirds, w[2], w[3])
		}
		if !ok {
			t.Errorf("keyword %q is not in the sieve's sets", w)
		}
	}
}

// runBefore is exact: a larger answer would hide a word's end from the
// walk, a smaller one makes it look at more positions.
func TestRunBefore(t *testing.T) {
	rnd := rand.New(rand.NewPCG(9, 10))
	sparse := func() uint64 { // whitespace at one position in eight
		x := rnd.Uint64()
		for range 2 {
			x &= rnd.Uint64()
		}
		return x
	}
	for range 2000 {
		prior, white := sparse(), sparse()
		for l := uint(1); l <= 63; l++ {
			var want uint64
			for j := range uint(64) {
				for k := uint(1); k <= l; k++ {
					// Position j-k of the block: prior's bit 64+j-k when before it.
					if j >= k && white&(1<<(j-k)) != 0 || j < k && prior&(1<<(64+j-k)) != 0 {
						want |= 1 << j
					}
				}
			}
			if got := runBefore(prior, white, l); got != want {
				t.Fatalf("runBefore(%#x, %#x, %d) = %#x, want %#x", prior, white, l, got, want)
			}
		}
	}
}

func upper(c byte) byte {
	if c >= 'a' && c <= 'z' {
		return c - 'a' + 'A'
	}
	return c
}

// keywordList is every keyword of p.
func (p *prefilter) keywordList() []string {
	var out []string
	for _, words := range p.words {
		for _, k := range words {
			out = append(out, k.word)
		}
	}
	return out
}
