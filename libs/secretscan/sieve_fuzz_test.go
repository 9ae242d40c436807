package secretscan

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// checkSieve fails t where the sieve, run over b as the walk runs it
// (runs of blocks, the whitespace of the block before each), leaves out a
// position the straight loop stops at: a keyword's start, a quote, or
// whitespace with none among the l bytes before it. Whitespace and quotes
// must be exact, after either right or -1 (the walk then looks back).
func checkSieve(t testing.TB, p *prefilter, b []byte, l int) {
	t.Helper()
	isWhite := func(j int) bool { return j >= 0 && classes[b[j]] == space }
	long := uint64(1)<<(l+1) - 1
	var s sieve
	var prior uint64
	i := 0
	for ; i+sieveMin <= len(b); i += s.run.n * 64 {
		s.fill(p, b, i, prior, long)
		if s.run.n < 1 || s.run.n > sieveRun || i+s.run.n*64+3 > len(b) {
			t.Fatalf("%q: a run of %d blocks from %d", b, s.run.n, i)
		}
		for k := range s.run.n {
			base := i + k*64
			for o := range uint(64) {
				j := base + int(o)
				bit := uint64(1) << o
				if got := s.run.white[k]&bit != 0; got != isWhite(j) {
					t.Fatalf("%q: whitespace at %d: %v", b, j, got)
				}
				if got := s.run.quotes[k]&bit != 0; got != (b[j] == '"') {
					t.Fatalf("%q: quote at %d: %v", b, j, got)
				}
				stop := b[j] == '"'
				if isWhite(j) {
					stop = true
					for d := 1; d <= l; d++ {
						if isWhite(j - d) {
							stop = false
						}
					}
				}
				if got := s.stops[k]&bit != 0; got != stop {
					t.Fatalf("%q (shortest %d): stop at %d: %v, want %v", b, l, j, got, stop)
				}
				if stop {
					want := -1
					for d := j - 1; d >= 0; d-- {
						if isWhite(d) {
							want = d + 1
							break
						}
					}
					if got := s.after(base, k, o, prior); got != -1 && got != want {
						t.Fatalf("%q: after at %d = %d, want %d", b, j, got, want)
					} else if got == -1 && want >= 0 && j-want < 63 {
						t.Fatalf("%q: after at %d = -1, want %d", b, j, want)
					}
				}
				if s.run.cands[k]&bit == 0 {
					for _, kw := range p.words[p.starts[pair(b[j], b[j+1])]] {
						if hasLowerPrefix(b[j:], kw.word) {
							t.Fatalf("%q: keyword %q at %d sieved out", b, kw.word, j)
						}
					}
				}
			}
		}
		prior = s.run.white[s.run.n-1]
	}
}

// checkDelims fails t where delims, from any offset it may be asked
// about, differs from the byte classes.
func checkDelims(t testing.TB, p *prefilter, b []byte) {
	t.Helper()
	for from := 0; from+64 <= len(b); from++ {
		m := p.sieve.delims(b[from:])
		for o := range 64 {
			if got := m&(1<<o) != 0; got != (classes[b[from+o]] != 0) {
				t.Fatalf("%q: delims from %d at %d: %v", b, from, from+o, got)
			}
		}
	}
}

// sieveKnown are sets whose shortest value is each edge of the sieve's
// whitespace check (8, 62, 63, 64, longer), some made of b's own bytes so
// that findings are likely.
func sieveKnown(b []byte) []*Known {
	sets := append(walkSets(), nil)
	for _, l := range []int{MinKnownLen, 13, 62, 63, 64, 70} {
		values := []string{strings.Repeat("v", l), walkValues[0]}
		if len(b) >= l {
			at := (len(b) - l) / 2
			values = append(values, string(b[at:at+l]), string(b[len(b)-l:]))
		}
		sets = append(sets, NewKnown([]byte("k"), values))
	}
	return sets
}

// compareSieved fails t if the walk with the sieve and without it disagree
// on b with known.
func compareSieved(t testing.TB, vector, straight *prefilter, known *Known, b []byte) int {
	t.Helper()
	var wantHits, gotHits []hit
	wantSet, wantFound := straight.walk(b, &wantHits, known)
	gotSet, gotFound := vector.walk(b, &gotHits, known)
	if gotSet != wantSet || !slices.Equal(gotHits, wantHits) {
		t.Fatalf("%q: keywords %s, want %s", b, hitWords(gotHits), hitWords(wantHits))
	}
	if !slices.Equal(gotFound, wantFound) {
		t.Fatalf("%q (%d values): known values at %v, want %v", b, known.Len(), gotFound, wantFound)
	}
	return len(gotHits) + len(gotFound)
}

// longPayload is b after shift bytes of filler, repeated to at least n
// bytes: fuzz inputs are mostly shorter than the sieve's blocks.
func longPayload(b []byte, shift, n int) []byte {
	p := bytes.Repeat([]byte{'x'}, shift)
	if len(b) == 0 {
		b = []byte(" ")
	}
	for len(p) < n {
		p = append(p, b...)
	}
	return p
}

// FuzzSieve: on any bytes made long (shifted against the blocks, repeated
// past a run of blocks), the sieve leaves every position the straight loop
// stops at, and the walk finds the same with and without it.
func FuzzSieve(f *testing.F) {
	for i, c := range walkCases {
		f.Add([]byte(c), uint8(i), uint8(i*7))
	}
	f.Add([]byte(`{"a":"`+walkValues[0]+` `), uint8(63), uint8(130))
	s, err := Default()
	if err != nil {
		f.Fatal(err)
	}
	if !sieveAvailable() {
		f.Skip("no vector sieve in this build or on this CPU")
	}
	vector := s.keywords
	straight := *s.keywords
	straight.vector = false
	f.Fuzz(func(t *testing.T, b []byte, shift, reps uint8) {
		p := longPayload(b, int(shift%130), sieveMin+int(reps)*9)
		for _, l := range []int{1, 7, MinKnownLen, 62, 63} {
			checkSieve(t, vector, p, l)
		}
		checkDelims(t, vector, p)
		for _, known := range sieveKnown(p) {
			compareSieved(t, vector, &straight, known, p)
		}
	})
}

// The sieve at its edges: payloads of each length around one block, two,
// a run and a run and a block; a keyword (each case) at each offset near a
// block's end, a run's end and the payload's end; whitespace and quotes
// near block edges, words as long as the shortest known value.
func TestSieveEdges(t *testing.T) {
	s := testScanner(t)
	if !sieveAvailable() {
		t.Skip("no vector sieve in this build or on this CPU")
	}
	vector := s.keywords
	straight := *s.keywords
	straight.vector = false
	keywords := s.keywords.keywordList()
	rnd := rand.New(rand.NewPCG(11, 12))
	var lens []int
	for _, n := range []int{64, 128, 1088, 2048} {
		for d := 0; d <= 6; d++ {
			lens = append(lens, n+d)
		}
	}
	found := 0
	for _, n := range lens {
		var offsets []int
		for _, edge := range []int{64, 128, 1024, 1088, n} {
			for d := -6; d <= 3; d++ {
				if at := edge + d; at >= 0 && at < n {
					offsets = append(offsets, at)
				}
			}
		}
		for _, k := range keywords {
			if n > 70 && n != 1090 {
				break // the edges of one run and the next are in 1,090 bytes
			}
			for _, at := range offsets {
				if at+len(k) > n {
					continue
				}
				p := []byte(strings.Repeat("a", n))
				copy(p[at:], k)
				if rnd.IntN(2) == 0 {
					copy(p[at:], strings.ToUpper(k))
				}
				checkSieve(t, vector, p, MinKnownLen)
				compareSieved(t, vector, &straight, nil, p)
			}
		}
		// A string from the start, whitespace at a and at a+l+d (l the
		// shortest known value, the word between it or one byte off).
		for _, l := range []int{MinKnownLen, 62, 63, 64} {
			known := NewKnown([]byte("k"), []string{strings.Repeat("v", l)})
			for _, at := range offsets {
				for d := -1; d <= 1; d++ {
					for _, end := range []byte{' ', '"', '\t'} {
						p := []byte(`"` + strings.Repeat("v", n-1))
						p[n/2] = '/' // a delimiter: the word and its tokens tried
						if at <= 0 || at+l+1+d >= n {
							continue
						}
						p[at] = ' '
						p[at+l+1+d] = end
						checkSieve(t, vector, p, min(l, 63))
						found += compareSieved(t, vector, &straight, known, p)
						p[at] = '"' // a string opened there instead
						p[0] = ' '
						checkSieve(t, vector, p, min(l, 63))
						found += compareSieved(t, vector, &straight, known, p)
					}
				}
			}
		}
	}
	if found < 1000 {
		t.Fatalf("only %d known values found", found)
	}
}
