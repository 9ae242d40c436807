package secretscan

import (
	"bytes"
	"strings"
)

// The separate passes the walk (walk.go) replaced, kept as its oracle and
// as the "before" of its paired benchmarks: the keyword walk over byte
// pairs and lowercased trigrams, and the known-value check over JSON
// strings and their tokens, as they were (commit 3ae6370).

// pairPrefilter is the keyword walk's own tables: a bit per hashed
// lowercased trigram of a keyword, a bit per pair that is a whole keyword.
type pairPrefilter struct {
	p     *prefilter
	tri   [1 << 18 / 64]uint64
	short [1 << 16 / 64]uint64
}

func newPairPrefilter(p *prefilter) *pairPrefilter {
	o := &pairPrefilter{p: p}
	for _, words := range p.words {
		for _, k := range words {
			i := pair(k.word[0], k.word[1])
			if len(k.word) == 2 {
				o.short[i/64] |= 1 << (i % 64)
				continue
			}
			t := lowerTri(k.word[0], k.word[1], k.word[2])
			o.tri[t/64] |= 1 << (t % 64)
		}
	}
	return o
}

func lowerTri(a, b, c byte) uint32 {
	return (uint32(lower[a])<<16 | uint32(lower[b])<<8 | uint32(lower[c])) * 2654435761 >> (32 - 18)
}

func (o *pairPrefilter) rules(b []byte, hits *[]hit) ruleSet {
	p := o.p
	out := p.always
	for i := 0; i+1 < len(b); i++ {
		pr := pair(b[i], b[i+1])
		w := p.starts[pr]
		if w == 0 {
			continue
		}
		if o.short[pr/64]&(1<<(pr%64)) == 0 {
			if i+2 == len(b) {
				continue
			}
			t := lowerTri(b[i], b[i+1], b[i+2])
			if o.tri[t/64]&(1<<(t%64)) == 0 {
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

// separateKnown is the known-value check on its own: each JSON string's
// whole content, else its tokens and words.
func separateKnown(k *Known, payload []byte) []Finding {
	if k.Len() == 0 {
		return nil
	}
	// Every candidate is fingerprinted: no memory of those found unknown,
	// so that the scan's (unknowns) is checked against this.
	var out []Finding
	try := func(start, end int) bool {
		n := end - start
		if n < MinKnownLen || n > maxKnownLen || !k.lens[n] {
			return false
		}
		for _, g := range k.groups {
			if !g.lens[n] {
				continue
			}
			if _, ok := g.sums[g.of.Of(payload[start:end])]; ok {
				out = append(out, Finding{Rule: RuleKnown, Start: start, End: end})
				return true
			}
		}
		return false
	}
	for i := 0; i < len(payload); i++ {
		q := bytes.IndexByte(payload[i:], '"')
		if q < 0 {
			break
		}
		start := i + q + 1
		end := closingQuote(payload, start)
		i = end
		if try(start, end) {
			continue
		}
		separateTokens(payload, start, end, try)
	}
	return out
}

func closingQuote(p []byte, start int) int {
	for at := start; ; {
		q := bytes.IndexByte(p[at:], '"')
		if q < 0 {
			return len(p)
		}
		end, slashes := at+q, 0
		for j := end - 1; j >= start && p[j] == '\\'; j-- {
			slashes++
		}
		if slashes%2 == 0 {
			return end
		}
		at = end + 1
	}
}

func separateTokens(payload []byte, start, end int, try func(int, int) bool) {
	p := payload[:end]
	word, tok := start, start
	alt := -1 // past a one-letter JSON escape (\n…) after tok's backslash
	for i := start; ; i++ {
		for i < len(p) && classes[p[i]] == 0 {
			i++
		}
		class := uint8(space)
		if i < len(p) {
			class = classes[p[i]]
		}
		if i-tok >= MinKnownLen {
			try(tok, i)
		}
		if alt > tok && i-alt >= MinKnownLen {
			try(alt, i)
		}
		if class == space && tok != word && i-word >= MinKnownLen {
			try(word, i)
		}
		if i == len(p) {
			return
		}
		tok, alt = i+1, -1
		if p[i] == '\\' && i+1 < len(p) && strings.IndexByte("ntrbf", p[i+1]) >= 0 {
			alt = i + 2
		}
		if class == space {
			word = i + 1
		}
	}
}
