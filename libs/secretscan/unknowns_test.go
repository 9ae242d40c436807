package secretscan

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestUnknownsExact: a candidate remembered as unknown is told apart from
// every text that differs from it in one byte, or in its length, among
// those that fall in its slot (a few hundred of the ~10,000 tried per
// seed), at each length from MinKnownLen to 40.
func TestUnknownsExact(t *testing.T) {
	rnd := rand.New(rand.NewPCG(15, 16))
	sameSlot := 0
	for range 8 {
		u := &unknowns{seed: rnd.Uint64()}
		for n := MinKnownLen; n <= 40; n++ {
			a := make([]byte, n+1) // one byte more: a longer lookalike
			for i := range a {
				a[i] = byte('a' + rnd.IntN(26))
			}
			p := append([]byte("x "), a...)
			u.add(p, 2, 2+n)
			if !u.has(p, 2, 2+n) {
				t.Fatalf("%q: not remembered", p[2:2+n])
			}
			_, _, slot := u.key(p, 2, 2+n)
			// A lookalike later in the same payload (the slot remembers a
			// place in it).
			try := func(b []byte) {
				q := append(append(bytes.Clone(p), ' '), b...)
				start, end := len(p)+1, len(q)
				if _, _, s := u.key(q, start, end); s != slot {
					return
				}
				sameSlot++
				if u.has(q, start, end) != bytes.Equal(b, p[2:2+n]) {
					t.Errorf("%q remembered: %q taken for it", p[2:2+n], b)
				}
			}
			try(a) // one byte longer, one shorter
			if n > MinKnownLen {
				try(a[:n-1])
			}
			for j := range n {
				for c := range 256 {
					b := bytes.Clone(a[:n])
					b[j] = byte(c)
					try(b)
				}
			}
		}
	}
	// Texts of one byte repeated share their first and last eight bytes
	// at every length: one remembered is none of another length; nor is
	// an empty slot a text of zero bytes.
	for range 64 {
		u := &unknowns{seed: rnd.Uint64()}
		zeros := make([]byte, 40)
		if u.has(zeros, 0, MinKnownLen) || u.has(zeros, 0, 20) {
			t.Errorf("an empty slot taken for %d zero bytes", MinKnownLen)
		}
		c := byte(rnd.IntN(256))
		p := bytes.Repeat([]byte{c}, 81)
		n := MinKnownLen + rnd.IntN(33)
		u.add(p, 0, n)
		_, _, slot := u.key(p, 0, n)
		for m := MinKnownLen; m <= 40; m++ {
			if _, _, s := u.key(p, 41, 41+m); s == slot && m != n {
				sameSlot++
				if u.has(p, 41, 41+m) {
					t.Errorf("%d bytes %#x remembered: %d taken for them", n, c, m)
				}
			}
		}
	}
	if sameSlot < 1000 {
		t.Fatalf("only %d lookalikes fell in their slot", sameSlot)
	}
	t.Logf("%d lookalikes in their slot", sameSlot)
}

// The memory of unknown candidates is lent by the scanner's pool: a
// candidate unknown in one scan is found in the next when the next's known
// set holds it, and no candidate's bytes stay in the pool after a scan.
func TestUnknownsPooled(t *testing.T) {
	s := testScanner(t)
	const value = "kv-0123456789-secret"
	var words []string
	for i := range 40 {
		words = append(words, fmt.Sprintf("word-%010d-abcd", i%12), value)
	}
	p := []byte(`{"text":"` + strings.Join(words, " ") + `"}`)
	other := NewKnown([]byte("k"), []string{"kv-9999999999-secret"}) // same length: value is hashed, found unknown
	holding := NewKnown([]byte("k"), []string{value})
	// Each scan draws a seed: a stale slot answers for value in about one
	// scan in 256.
	for range 2000 {
		if found := s.Scan(p, other); len(found) != 0 {
			t.Fatalf("found %v under another set", found)
		}
		sc := s.getScratch()
		if sc.unknowns != (unknowns{}) {
			t.Fatalf("the pooled scratch holds a scan's candidates")
		}
		s.putScratch(sc)
		if found := s.Scan(p, holding); len(found) != 40 {
			t.Fatalf("found %d, want 40", len(found))
		}
	}
}
