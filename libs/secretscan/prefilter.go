package secretscan

// ruleSet is a set of rules by their index in Scanner.rules (up to 512).
type ruleSet [8]uint64

func (s *ruleSet) add(i int) { s[i/64] |= 1 << (i % 64) }
func (s *ruleSet) or(o *ruleSet) {
	for i := range s {
		s[i] |= o[i]
	}
}
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
		if p.starts[i] == 0 {
			p.starts[i] = uint16(len(p.words))
			p.words = append(p.words, nil)
		}
		p.words[p.starts[i]] = append(p.words[p.starts[i]], keyword{word: k, rules: rules})
	}
	return p
}

func pair(a, b byte) uint16 { return uint16(lower[a])<<8 | uint16(lower[b]) }

// rules returns the rules whose keywords are in b.
func (p *prefilter) rules(b []byte) ruleSet {
	out := p.always
	for i := 0; i+1 < len(b); i++ {
		w := p.starts[pair(b[i], b[i+1])]
		if w == 0 {
			continue
		}
		for j := range p.words[w] {
			if k := &p.words[w][j]; hasLowerPrefix(b[i:], k.word) {
				out.or(&k.rules)
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
