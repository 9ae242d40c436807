package secretscan

// prefilter says whether a payload holds a keyword of gitleaks' rules
// (every rule has some, and gitleaks runs a rule only when one is in the
// text), as gitleaks' own prefilter does but without its lowercased copy
// and Aho-Corasick walk (4–8 ns a byte: 0.5 ms for a 64 KiB result). Each
// pair of bytes, lowercased, indexes the keywords that start with it,
// which are then compared in place.
type prefilter struct {
	starts [1 << 16]uint16 // 1 + index in words, or 0
	words  [][]string
	all    bool // a one-byte keyword: every payload goes through
}

func newPrefilter(keywords []string) *prefilter {
	p := &prefilter{words: [][]string{nil}}
	for _, k := range keywords {
		if len(k) < 2 {
			p.all = true
			continue
		}
		i := pair(k[0], k[1])
		if p.starts[i] == 0 {
			p.starts[i] = uint16(len(p.words))
			p.words = append(p.words, nil)
		}
		p.words[p.starts[i]] = append(p.words[p.starts[i]], k)
	}
	return p
}

func pair(a, b byte) uint16 { return uint16(lower[a])<<8 | uint16(lower[b]) }

func (p *prefilter) mayMatch(b []byte) bool {
	if p.all {
		return true
	}
	for i := 0; i+1 < len(b); i++ {
		w := p.starts[pair(b[i], b[i+1])]
		if w == 0 {
			continue
		}
		for _, k := range p.words[w] {
			if hasLowerPrefix(b[i:], k) {
				return true
			}
		}
	}
	return false
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
