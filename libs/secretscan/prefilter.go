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
// result). Each pair of bytes, lowercased, indexes the keywords that start
// with it, which are then compared in place.
type prefilter struct {
	// tri has a bit per (hashed) first three bytes of a keyword, short a
	// bit per pair that is a whole keyword: prose is full of pairs that
	// start some keyword ("pa", "ke", "to"), and the three-byte test skips
	// most of them before their keyword lists are compared.
	tri    [1 << triBits / 64]uint64
	short  [1 << 16 / 64]uint64
	starts [1 << 16]uint16 // 1 + index in words, or 0
	words  [][]keyword
	always ruleSet // rules with a one-byte keyword: every payload may match them
}

// keyword is one keyword and the rules that have it.
type keyword struct {
	word  string
	rules ruleSet
}

func newPrefilter(keywords map[string]ruleSet) *prefilter {
	p := &prefilter{words: [][]keyword{nil}}
	for k, rules := range keywords {
		if len(k) < 2 {
			p.always.or(&rules)
			continue
		}
		i := pair(k[0], k[1])
		if len(k) == 2 {
			p.short[i/64] |= 1 << (i % 64)
		} else {
			t := tri(lower[k[0]], lower[k[1]], lower[k[2]])
			p.tri[t/64] |= 1 << (t % 64)
		}
		if p.starts[i] == 0 {
			p.starts[i] = uint16(len(p.words))
			p.words = append(p.words, nil)
		}
		p.words[p.starts[i]] = append(p.words[p.starts[i]], keyword{word: k, rules: rules})
	}
	return p
}

func pair(a, b byte) uint16 { return uint16(lower[a])<<8 | uint16(lower[b]) }

// triBits sizes tri: 2^18 bits (32 KiB) for a few hundred keywords.
const triBits = 18

// tri hashes three lowercased bytes to a bit of tri.
func tri(a, b, c byte) uint32 {
	return (uint32(a)<<16 | uint32(b)<<8 | uint32(c)) * 2654435761 >> (32 - triBits)
}

// hit is an occurrence of a keyword at pos.
type hit struct {
	pos int
	k   *keyword
}

// rules returns the rules whose keywords are in b, and appends to hits
// (unless nil) every occurrence of a keyword.
func (p *prefilter) rules(b []byte, hits *[]hit) ruleSet {
	out := p.always
	for i := 0; i+1 < len(b); i++ {
		pr := pair(b[i], b[i+1])
		w := p.starts[pr]
		if w == 0 {
			continue
		}
		if p.short[pr/64]&(1<<(pr%64)) == 0 {
			if i+2 == len(b) {
				continue
			}
			t := tri(lower[b[i]], lower[b[i+1]], lower[b[i+2]])
			if p.tri[t/64]&(1<<(t%64)) == 0 {
				continue
			}
		}
		for j := range p.words[w] {
			if k := &p.words[w][j]; hasLowerPrefix(b[i:], k.word) {
				out.or(&k.rules)
				if hits != nil {
					*hits = append(*hits, hit{i, k})
				}
			}
		}
	}
	return out
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
