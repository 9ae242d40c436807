package secretscan

import (
	"regexp"
	"regexp/syntax"
	"unicode/utf8"
)

// Heads: for a rule whose matches start with a keyword (its anchor,
// span.go), the bytes every match starts with, as a short run of byte sets
// (twilio-api-key's `SK[0-9a-fA-F]{32}`: S, K, then 32 hex digits). A
// keyword occurrence whose bytes fit none of the rule's heads starts no
// match, and the anchor's regexp is not run there: in prose each "ask" and
// "tasks." is such an occurrence of twilio's "sk" or vault's "s.", and the
// regexp (its backtracker clearing its state for every one) cost a third
// of the scan of keyword-dense sentences.

// maxHeads bounds the alternatives a rule's heads keep, maxHeadLen their
// length: past them a head is cut short (a prefix of a match's start is
// still one) or the rule gets none (every occurrence goes to the anchor).
const (
	maxHeads   = 8
	maxHeadLen = 64
)

// head is a run of byte sets a match's first bytes fall in, one a byte.
type head []headStep

// headStep is n consecutive bytes of one set.
type headStep struct {
	set byteSet
	n   int
}

// byteSet is a set of bytes.
type byteSet [4]uint64

func (b *byteSet) add(c byte)      { b[c>>6] |= 1 << (c & 63) }
func (b *byteSet) has(c byte) bool { return b[c>>6]&(1<<(c&63)) != 0 }
func (b *byteSet) addRange(lo, hi byte) {
	for c := int(lo); c <= int(hi); c++ {
		b.add(byte(c))
	}
}

// startsAny reports whether p starts with bytes fitting one of heads (true
// for none: the rule has no heads to go by).
func startsAny(heads []head, p []byte) bool {
	if heads == nil {
		return true
	}
	for _, h := range heads {
		if h.starts(p) {
			return true
		}
	}
	return false
}

// starts reports whether p's first bytes fall in h's sets, one a byte (a p
// shorter than h cannot hold a match).
func (h head) starts(p []byte) bool {
	i := 0
	for _, s := range h {
		if len(p)-i < s.n {
			return false
		}
		for _, c := range p[i : i+s.n] {
			if !s.set.has(c) {
				return false
			}
		}
		i += s.n
	}
	return true
}

// headsOf are the heads of re's matches; nil when they say nothing (a
// match may start with any byte, or there are too many alternatives).
// (?i)'s k and s also match the Kelvin sign and the long s, which a
// payload reaching the windows does not hold (window.go, foldRunes): an
// ASCII letter folds to its two cases here.
func headsOf(re *regexp.Regexp) []head {
	t, err := syntax.Parse(re.String(), syntax.Perl)
	if err != nil {
		return nil
	}
	hs, _ := heads(t)
	for _, h := range hs {
		if len(h) > 0 {
			return hs
		}
	}
	return nil
}

// heads are the heads of t's matches and whether each is the whole of the
// text it stands for (t matches a fixed number of bytes, each in its set,
// so what follows t may be appended).
func heads(t *syntax.Regexp) (hs []head, whole bool) {
	switch t.Op {
	case syntax.OpEmptyMatch, syntax.OpBeginLine, syntax.OpEndLine,
		syntax.OpBeginText, syntax.OpEndText, syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return []head{nil}, true
	case syntax.OpLiteral:
		var h head
		for _, r := range t.Rune {
			if r >= utf8.RuneSelf {
				if t.Flags&syntax.FoldCase != 0 {
					return []head{h}, false
				}
				var buf [utf8.UTFMax]byte
				for _, c := range buf[:utf8.EncodeRune(buf[:], r)] {
					var s byteSet
					s.add(c)
					h = h.then(s, 1)
				}
				continue
			}
			var s byteSet
			s.add(byte(r))
			if t.Flags&syntax.FoldCase != 0 {
				s.add(byte(asciiFold(r)))
			}
			h = h.then(s, 1)
		}
		return []head{h}, true
	case syntax.OpCharClass:
		s, fixed := classSet(t.Rune)
		return []head{head{}.then(s, 1)}, fixed
	case syntax.OpCapture:
		return heads(t.Sub[0])
	case syntax.OpRepeat, syntax.OpPlus:
		lo, hi := 1, -1
		if t.Op == syntax.OpRepeat {
			lo, hi = t.Min, t.Max
		}
		if lo == 0 {
			return []head{nil}, false
		}
		sub, subWhole := heads(t.Sub[0])
		// A class outside ASCII matches runes of several bytes, each byte
		// in its set: lo runes are at least lo bytes of it.
		if len(sub) != 1 || !subWhole && t.Sub[0].Op != syntax.OpCharClass {
			return sub, false // one repetition's start
		}
		var h head
		for range lo {
			for _, s := range sub[0] {
				h = h.then(s.set, s.n)
			}
		}
		return []head{h}, subWhole && hi == lo
	case syntax.OpConcat:
		hs = []head{nil}
		for _, c := range t.Sub {
			next, w := heads(c)
			p := productHeads(hs, next)
			if p == nil {
				return hs, false
			}
			if hs = p; !w {
				return hs, false
			}
		}
		return hs, true
	case syntax.OpAlternate:
		whole = true
		for _, c := range t.Sub {
			next, w := heads(c)
			if len(hs)+len(next) > maxHeads {
				return []head{nil}, false
			}
			hs, whole = append(hs, next...), whole && w
		}
		return hs, whole
	}
	// Any byte, or an optional part: a match may start anywhere.
	return []head{nil}, false
}

// then is h followed by n bytes of set s, cut at maxHeadLen.
func (h head) then(s byteSet, n int) head {
	n = min(n, maxHeadLen-h.len())
	if n <= 0 {
		return h
	}
	if k := len(h) - 1; k >= 0 && h[k].set == s {
		return append(h[:k:k], headStep{s, h[k].n + n})
	}
	return append(h[:len(h):len(h)], headStep{s, n})
}

func (h head) len() int {
	n := 0
	for _, s := range h {
		n += s.n
	}
	return n
}

// productHeads are each of a followed by each of b; nil past maxHeads.
func productHeads(a, b []head) []head {
	if len(a)*len(b) > maxHeads {
		return nil
	}
	var out []head
	for _, x := range a {
		for _, y := range b {
			h := x
			for _, s := range y {
				h = h.then(s.set, s.n)
			}
			out = append(out, h)
		}
	}
	return out
}

// classSet is the set of the first bytes of a class's runes, and whether
// each of its runes is one byte (ASCII): one outside ASCII adds every byte
// that starts or continues a longer encoding, and then the length of what
// the class matches is not known.
func classSet(ranges []rune) (s byteSet, fixed bool) {
	fixed = true
	for i := 0; i+1 < len(ranges); i += 2 {
		lo, hi := ranges[i], ranges[i+1]
		if lo < utf8.RuneSelf {
			s.addRange(byte(lo), byte(min(hi, utf8.RuneSelf-1)))
		}
		if hi >= utf8.RuneSelf {
			s.addRange(0x80, 0xff)
			fixed = false
		}
	}
	return s, fixed
}

// asciiFold is an ASCII letter's other case (r itself for other runes).
func asciiFold(r rune) rune {
	switch {
	case 'a' <= r && r <= 'z':
		return r - 'a' + 'A'
	case 'A' <= r && r <= 'Z':
		return r - 'A' + 'a'
	}
	return r
}
