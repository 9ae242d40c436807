package secretscan

import (
	"encoding/binary"
	"math/bits"
)

// The scan's per-byte work is one loop over the payload (walk): at each
// position its four bytes looked up in the keyword bitset (prefilter.grams)
// and its first two in one table (prefilter.pairs) that gives both a
// two-byte keyword and the byte's flags for the known-value check. It
// replaced two walks, the keyword one (over byte pairs and trigrams) and
// the token one (over byte classes), whose branches on pairs that start
// some keyword and on every word's end were mispredicted every few bytes.
// Here the common byte takes no branch: the loop (straight) leaves its
// path only where a keyword may start, at a JSON quote, or at whitespace
// ending a word long enough to hold a known value, whose tokens are then
// walked.

// walker is one walk's state outside its loop.
type walker struct {
	p    *prefilter
	b    []byte
	hits *[]hit
	set  ruleSet
	// The known-value check (nil without known values): the JSON string
	// the walk is in, from its first byte str; its candidates' findings
	// start at found[mark].
	try      *tryer
	inString bool
	str      int
	mark     int
}

// walk returns the rules whose keywords are in b, appending to hits
// (unless nil) every occurrence of a keyword, and the known values among
// the candidate tokens of b's JSON strings (none when known is nil): each
// string's whole content, its words (between whitespace) and its tokens
// (between delimiters, classes), only those of a known length hashed.
// A string whose whole content is known is one finding.
func (p *prefilter) walk(b []byte, hits *[]hit, known *Known) (ruleSet, []Finding) {
	return p.walkWith(b, hits, known, nil)
}

// walkWith is walk with spare (unless nil) lent as the known-value
// check's memory of unknown candidates (8 KB, made per scan otherwise).
func (p *prefilter) walkWith(b []byte, hits *[]hit, known *Known, spare *unknowns) (ruleSet, []Finding) {
	w := walker{p: p, b: b, hits: hits, set: p.always}
	n := len(b)
	// Every candidate lies in a word at least as long as the shortest
	// known value: the loop stops at whitespace ending such a word (and at
	// quotes), and the word's tokens are walked then. Without known values
	// only keywords stop it.
	var blanks, stops uint8 = 0, short
	// long tells, over the whitespace among the bytes before i and at i,
	// whitespace ending a word as long as the shortest known value (63
	// bytes at most: the mask's bits).
	var long uint64
	if known.Len() > 0 {
		w.try = &tryer{k: known, payload: b, spare: spare}
		blanks, stops = blank, short|quote
		long = 1<<(min(known.shortest, 63)+1) - 1
	}
	var m uint64 // whitespace among the bytes before i, the last at bit 0
	i := 0
	if p.vector && n >= sieveMin {
		i, m = w.sieved(long)
	}
	for ; i < n; i++ {
		i, m = p.straight(b, i, m, long, blanks, stops)
		if i == n {
			break
		}
		// The four bytes from i, zeros past the end.
		var x uint32
		if i+4 <= n {
			x = binary.LittleEndian.Uint32(b[i:])
		} else {
			for j := n - 1; j >= i; j-- {
				x = x<<8 | uint32(b[j])
			}
		}
		f := p.pairs[uint16(x)]
		if h := gramHash(x); p.grams[h/64]&(1<<(h%64)) != 0 || f&short != 0 {
			w.keywords(i)
		}
		m = m<<1 | uint64(f&blanks)
		if m&long == blank || f&stops&quote != 0 {
			w.stop(i, afterWhite(i, m))
		}
	}
	if w.try == nil {
		return w.set, nil
	}
	if w.inString { // an unterminated last string ends with the payload
		w.end(n, afterWhite(n, m<<1))
	}
	return w.set, w.try.found
}

// afterWhite is where a word ending before i starts if whitespace is
// among the 63 bytes before i (m: whitespace among the bytes up to i, i at
// bit 0): after the last; else -1.
func afterWhite(i int, m uint64) int {
	if before := m >> 1; before != 0 {
		return i - bits.TrailingZeros64(before)
	}
	return -1
}

// straight walks b from i while no position needs more than a look: one
// that may start a keyword, or with known values (blanks and stops set) a
// quote or whitespace ending a long word (long, over m). It returns where it
// stopped (len(b)-3 at most: the last positions have no four bytes to
// read) and m, whitespace among the bytes before it (bit 0 the last). A
// leaf, its state in registers.
func (p *prefilter) straight(b []byte, i int, m, long uint64, blanks, stops uint8) (int, uint64) {
	grams, pairs := &p.grams, &p.pairs
	rest := b[i:] // indexed from 0: no bounds checks in the loop
	j := 0
	for ; j < len(rest)-3; j++ {
		x := uint32(rest[j]) | uint32(rest[j+1])<<8 | uint32(rest[j+2])<<16 | uint32(rest[j+3])<<24
		h := gramHash(x)
		if grams[h/64]&(1<<(h%64)) != 0 {
			break
		}
		f := pairs[uint16(x)]
		next := m<<1 | uint64(f&blanks)
		if next&long == blank || f&stops != 0 {
			break
		}
		m = next
	}
	return i + j, m
}

// keywords compares the keywords that start with b[i:i+2] there.
func (w *walker) keywords(i int) {
	b := w.b
	if i+1 >= len(b) {
		return
	}
	p := w.p
	words := p.words[p.starts[pair(b[i], b[i+1])]]
	if i+8 <= len(b) {
		// Eight bytes at once (most compares fail in the first few).
		x := binary.LittleEndian.Uint64(b[i:])
		for j := range words {
			if k := &words[j]; k.startsAt(b[i:], x) {
				w.set.or(&k.rules)
				if w.hits != nil {
					*w.hits = append(*w.hits, hit{i, k})
				}
			}
		}
		return
	}
	for j := range words {
		if k := &words[j]; hasLowerPrefix(b[i:], k.word) {
			w.set.or(&k.rules)
			if w.hits != nil {
				*w.hits = append(*w.hits, hit{i, k})
			}
		}
	}
}

// stop handles b[i], a quote or whitespace that may end a long word;
// after is where the word before i starts, or -1 (see wordStart).
func (w *walker) stop(i, after int) {
	if w.b[i] == '"' {
		switch {
		case !w.inString:
			w.inString, w.str, w.mark = true, i+1, len(w.try.found)
		case !escaped(w.b, w.str, i):
			w.end(i, after)
			w.inString = false
		}
		// Else an escaped quote, a delimiter inside a word.
		return
	}
	if !w.inString {
		return
	}
	w.words(w.wordStart(i, after), i)
}

// wordStart is where the word of the string ending before i starts: after
// the last whitespace before i, which is after-1 when after is not -1, and
// is looked for further back otherwise.
func (w *walker) wordStart(i, after int) int {
	if after >= 0 {
		return max(w.str, after)
	}
	// Eight bytes at a time while none is under 0x21 (every whitespace
	// byte is): a 64 KiB token (a blob, minified code) was read back byte
	// by byte.
	b := w.b
	for i-8 >= w.str {
		if x := binary.LittleEndian.Uint64(b[i-8 : i]); (x-0x2121212121212121)&^x&0x8080808080808080 != 0 {
			break
		}
		i -= 8
	}
	for i > w.str && classes[b[i-1]] != space {
		i--
	}
	return i
}

// words tries the tokens of the word b[start:end] and, if it has
// delimiters inside, the word itself; it reports whether it had none (or
// was too short for any known value, when none was tried).
func (w *walker) words(start, end int) bool {
	if end-start < w.try.k.shortest {
		return true
	}
	tok, from := start, start
	alt := -1 // where the token from tok starts past a JSON escape's letter (escapeEnd)
	if w.p.vector {
		// 64 bytes a step while they are there (the bytes of a long token,
		// a blob, are not looked at one by one).
		for ; from < end && from+64 <= len(w.b); from += 64 {
			m := w.p.sieve.delims(w.b[from:])
			if n := end - from; n < 64 {
				m &= 1<<n - 1
			}
			for ; m != 0; m &= m - 1 {
				j := from + bits.TrailingZeros64(m)
				w.token(tok, alt, j)
				tok, alt = j+1, w.escapeEnd(j, end)
			}
		}
	}
	for k, c := range w.b[min(from, end):end] { // ranged: no bounds check a byte
		if classes[c] == 0 {
			continue
		}
		j := from + k
		w.token(tok, alt, j)
		tok, alt = j+1, w.escapeEnd(j, end)
	}
	w.token(tok, alt, end)
	if tok == start {
		return true
	}
	w.try.try(start, end)
	return false
}

// token tries the token b[tok:j], and b[alt:j] too when alt is set.
func (w *walker) token(tok, alt, j int) {
	if j-tok >= MinKnownLen {
		w.try.try(tok, j)
	}
	if alt > tok && j-alt >= MinKnownLen {
		w.try.try(alt, j)
	}
}

// escapeEnd is where the bytes after the delimiter at j start when it is
// the backslash of a JSON escape of one letter (\n, \t, \r, \b, \f), which
// ends the word before it as the character it stands for would: a value
// on a line of its own in a string ("…\nVALUE\n…") is a token. -1
// otherwise. Whether the backslash itself was escaped (\\n: a backslash and
// an n) is not told here: both tokens are tried.
func (w *walker) escapeEnd(j, end int) int {
	if w.b[j] != '\\' || j+1 >= end {
		return -1
	}
	switch w.b[j+1] {
	case 'n', 't', 'r', 'b', 'f':
		return j + 2
	}
	return -1
}

// end closes the string ending at i (after as for wordStart). A string
// whose whole content is known is one finding, none of its parts.
func (w *walker) end(i, after int) {
	word := w.wordStart(i, after)
	if w.words(word, i) && word == w.str {
		return // the whole was its only token, just tried
	}
	t := w.try
	if t.try(w.str, i) {
		t.found = append(t.found[:w.mark], t.found[len(t.found)-1])
	}
}

// escaped reports whether the quote at q, in the string starting at start,
// is escaped: after an odd number of backslashes.
func escaped(b []byte, start, q int) bool {
	n := 0
	for j := q - 1; j >= start && b[j] == '\\'; j-- {
		n++
	}
	return n%2 == 1
}
