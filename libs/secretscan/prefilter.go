package secretscan

// ruleSet is a set of rules by their index in Scanner.rules (up to 512).
type ruleSet [8]uint64

func (s *ruleSet) add(i int) { s[i/64] |= 1 << (i % 64) }
func (s *ruleSet) or(o *ruleSet) {
	for i := range s {
		s[i] |= o[i]
	}
}
func (s *ruleSet) and(o *ruleSet) {
	for i := range s {
		s[i] &= o[i]
	}
}
func (s *ruleSet) andNot(o *ruleSet) {
	for i := range s {
		s[i] &^= o[i]
	}
}
func (s *ruleSet) remove(i int)   { s[i/64] &^= 1 << (i % 64) }
func (s *ruleSet) has(i int) bool { return s[i/64]&(1<<(i%64)) != 0 }
func (s *ruleSet) empty() bool    { return *s == ruleSet{} }

// maxRules bounds the rules a scanner holds (ruleSet's bits).
const maxRules = len(ruleSet{}) * 64

// prefilter finds which of gitleaks' rules a payload may match: those with
// a keyword in it (every rule has some, and gitleaks runs a rule only when
// one is in the text), as gitleaks' own prefilter does but without its
// lowercased copy and Aho-Corasick walk (4–8 ns a byte: 0.5 ms for a 64 KiB
// result). The walk (walk.go) looks each position's four bytes up in a
// bitset and its two in a table; where a keyword may start, the keywords
// starting with its pair of bytes, lowercased, are compared in place.
type prefilter struct {
	// grams has a bit per (hashed) first four bytes of a keyword in every
	// case (the walk reads bytes as they are, no lowercasing in its loop),
	// a three-byte keyword's followed by any byte. Prose is full of three
	// bytes that start a keyword ("api", "sha", "acc"): four skip most.
	grams [1 << gramBits / 64]uint64
	// pairs are, by two bytes as read (the first in the low byte), the
	// walk's flags: whether the first is whitespace or a quote, and
	// whether the two, in any case, are a two-byte keyword.
	pairs  [1 << 16]uint8
	starts [1 << 16]uint16 // by lowercased pair: 1 + index in words, or 0
	words  [][]keyword
	always ruleSet // rules with a one-byte keyword: every payload may match them
	// sieve holds the keywords' pairs for the vector sieve (sieve.go),
	// which the walk uses when vector is set.
	sieve  *sieveSets
	vector bool
}

// Flags in prefilter.pairs.
const (
	blank = 1 << iota // the first byte ends a word (whitespace)
	quote             // the first byte opens or closes a JSON string, unless escaped
	short             // the two bytes are a two-byte keyword
)

// keyword is one keyword and the rules that have it.
type keyword struct {
	word  string
	rules ruleSet
	// The keyword's first eight bytes as one word (the first in the low
	// byte), for a compare of up to eight bytes at once: eight bytes read
	// from a position, with fold or'ed in (0x20 at its letters, which maps
	// an upper case letter to its lower case and no other byte to a lower
	// case letter), and mask applied, equal head where they start it.
	head, mask, fold uint64
}

// newKeyword is k (lowercase) with the rules that have it.
func newKeyword(k string, rules ruleSet) keyword {
	kw := keyword{word: k, rules: rules}
	for j := range min(len(k), 8) {
		c := uint64(k[j])
		kw.head |= c << (8 * j)
		kw.mask |= 0xff << (8 * j)
		if 'a' <= k[j] && k[j] <= 'z' {
			kw.fold |= 0x20 << (8 * j)
		}
	}
	return kw
}

// startsAt reports whether b, lowercased, starts with k; x is b's first
// eight bytes (b holds them).
func (k *keyword) startsAt(b []byte, x uint64) bool {
	return (x|k.fold)&k.mask == k.head && (len(k.word) <= 8 || hasLowerPrefix(b[8:], k.word[8:]))
}

func newPrefilter(keywords map[string]ruleSet) *prefilter {
	p := &prefilter{words: [][]keyword{nil}, sieve: newSieveSets(), vector: sieveAvailable()}
	for i := range p.pairs {
		switch c := byte(i); {
		case classes[c] == space:
			p.pairs[i] = blank
		case c == '"':
			p.pairs[i] = quote
		}
	}
	for k, rules := range keywords {
		if len(k) < 2 {
			p.always.or(&rules)
			continue
		}
		// The bytes that lowercase to each of the keyword's first four
		// (any byte after a three-byte keyword).
		var cases [4][]byte
		for j := range cases {
			for c := range 256 {
				if j >= len(k) || lower[c] == k[j] {
					cases[j] = append(cases[j], byte(c))
				}
			}
		}
		for _, a := range cases[0] {
			for _, b := range cases[1] {
				if len(k) == 2 {
					p.pairs[uint16(a)|uint16(b)<<8] |= short
					continue
				}
				for _, c := range cases[2] {
					for _, d := range cases[3] {
						h := gramHash(uint32(a) | uint32(b)<<8 | uint32(c)<<16 | uint32(d)<<24)
						p.grams[h/64] |= 1 << (h % 64)
					}
				}
			}
		}
		p.sieve.addKeyword(k)
		i := pair(k[0], k[1])
		if p.starts[i] == 0 {
			p.starts[i] = uint16(len(p.words))
			p.words = append(p.words, nil)
		}
		p.words[p.starts[i]] = append(p.words[p.starts[i]], newKeyword(k, rules))
	}
	return p
}

func pair(a, b byte) uint16 { return uint16(lower[a])<<8 | uint16(lower[b]) }

// gramBits sizes grams: 2^20 bits (128 KiB) for some 10,000 keyword
// starts in their cases (the three-byte keywords' most), ~1 % of them set.
const gramBits = 20

// gramHash hashes four bytes (the first in the low byte) to a bit of grams.
func gramHash(x uint32) uint32 { return x * 2654435761 >> (32 - gramBits) }

// hit is an occurrence of a keyword at pos.
type hit struct {
	pos int
	k   *keyword
}

// rules returns the rules whose keywords are in b, and appends to hits
// (unless nil) every occurrence of a keyword.
func (p *prefilter) rules(b []byte, hits *[]hit) ruleSet {
	set, _ := p.walk(b, hits, nil)
	return set
}

// hasLowerPrefix reports whether b, lowercased, starts with k.
func hasLowerPrefix(b []byte, k string) bool {
	if len(b) < len(k) {
		return false
	}
	for j := 0; j < len(k); j++ {
		if lower[b[j]] != k[j] {
			return false
		}
	}
	return true
}

// lower maps ASCII upper case to lower case, other bytes to themselves
// (gitleaks' keywords are lowercase ASCII).
var lower = func() (t [256]byte) {
	for i := range t {
		t[i] = byte(i)
		if i >= 'A' && i <= 'Z' {
			t[i] = byte(i) + 'a' - 'A'
		}
	}
	return t
}()
