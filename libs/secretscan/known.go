package secretscan

import (
	"bytes"
	"crypto/hmac"
	"fmt"
	"hash/maphash"

	"github.com/mcpbus/mcpbus/libs/secretscan/fingerprint"
)

// MinKnownLen is the shortest known value worth looking for: shorter ones
// (a port, "true") would match ordinary text.
const MinKnownLen = fingerprint.MinLen

// maxKnownLen bounds the candidates hashed: a longer value (a PEM key) is
// left to gitleaks' own rules.
const maxKnownLen = fingerprint.MaxLen

// Known is a set of known secret values held as keyed fingerprints
// (fingerprint: SipHash-2-4-128 under a key), never as the values: a
// set may be kept, logged by accident or sent without giving a value away
// to whoever lacks the key. A set may hold groups under several keys (a
// runner's own values, the credential service's feed).
type Known struct {
	groups []*group
	lens   [maxKnownLen + 1]bool // every group's lengths: a candidate of another length is not hashed
}

// group is the fingerprints made under one key.
type group struct {
	key  []byte
	of   fingerprint.Maker
	sums map[fingerprint.Sum]struct{}
	lens [maxKnownLen + 1]bool
}

// NewKnown fingerprints values under key; values shorter than MinKnownLen
// are left out. A value is added as written and as JSON escapes it, since
// payloads are scanned as JSON text.
func NewKnown(key []byte, values []string) *Known {
	g := &group{key: key, of: fingerprint.New(key), sums: map[fingerprint.Sum]struct{}{}}
	for _, v := range values {
		for _, f := range fingerprint.Forms(v) {
			g.sums[g.of.Of([]byte(f))] = struct{}{}
			g.lens[len(f)] = true
		}
	}
	return &Known{groups: []*group{g}, lens: g.lens}
}

// KnownFromSums is the set of fingerprints made elsewhere under key (the
// credential service's feed) with alg: sums holds them end to end, lengths
// the lengths of the texts they were made of. Sums made another way than
// fingerprint.Alg are refused: they would match nothing.
func KnownFromSums(alg string, key []byte, sums []byte, lengths []int) (*Known, error) {
	if alg != fingerprint.Alg {
		return nil, fmt.Errorf("secretscan: fingerprints made with %q, this build reads %q (the credential service and the runners are of different versions)", alg, fingerprint.Alg)
	}
	if len(sums)%fingerprint.Size != 0 {
		return nil, fmt.Errorf("secretscan: %d bytes of fingerprints is not a whole number of %d-byte sums", len(sums), fingerprint.Size)
	}
	g := &group{key: key, of: fingerprint.New(key), sums: make(map[fingerprint.Sum]struct{}, len(sums)/fingerprint.Size)}
	for i := 0; i < len(sums); i += fingerprint.Size {
		g.sums[fingerprint.Sum(sums[i:i+fingerprint.Size])] = struct{}{}
	}
	for _, n := range lengths {
		if n < MinKnownLen || n > maxKnownLen {
			return nil, fmt.Errorf("secretscan: a fingerprinted length of %d is outside [%d, %d]", n, MinKnownLen, maxKnownLen)
		}
		g.lens[n] = true
	}
	return &Known{groups: []*group{g}, lens: g.lens}, nil
}

// Len is the number of fingerprints.
func (k *Known) Len() int {
	if k == nil {
		return 0
	}
	n := 0
	for _, g := range k.groups {
		n += len(g.sums)
	}
	return n
}

// scan finds known values among the candidate tokens of payload: each JSON
// string's whole content, its words (split on whitespace) and its tokens
// (split on characters a secret rarely holds). Only candidates of a known
// length are hashed, so the cost grows with the payload, not the set.
func (k *Known) scan(payload []byte) []Finding {
	if k.Len() == 0 {
		return nil
	}
	var out []Finding
	// unknown: made once a few candidates were hashed
	var unknown *unknowns
	hashed := 0
	try := func(start, end int) bool {
		n := end - start
		if n < MinKnownLen || n > maxKnownLen || !k.lens[n] {
			return false
		}
		if unknown.has(payload, start, end) {
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
		if hashed++; hashed == 8 {
			unknown = &unknowns{seed: maphash.MakeSeed()}
		}
		unknown.add(payload, start, end)
		return false
	}
	for i := 0; i < len(payload); i++ {
		q := bytes.IndexByte(payload[i:], '"')
		if q < 0 {
			break
		}
		// A JSON string: its closing quote is the next one not escaped (after
		// an even number of backslashes).
		start := i + q + 1
		end := closingQuote(payload, start)
		i = end
		if try(start, end) {
			continue
		}
		k.tokens(payload, start, end, try)
	}
	return out
}

// closingQuote is the index of the quote that closes the JSON string
// starting at start, or len(p).
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

// unknowns remembers candidates a scan hashed and found in no group, by
// their place in the payload (no copy of them is made): text repeats (the
// words of prose, field names), and a lookup here (an unkeyed hash of the
// text and a compare) costs less than a fingerprint per group and a map
// lookup each. A slot per hash, the last candidate kept.
type unknowns struct {
	seed  maphash.Seed
	slots [256]struct {
		h          uint64
		start, end int
	}
}

func (u *unknowns) has(p []byte, start, end int) bool {
	if u == nil {
		return false
	}
	h := maphash.Bytes(u.seed, p[start:end])
	s := &u.slots[h%uint64(len(u.slots))]
	return s.end != 0 && s.h == h && bytes.Equal(p[s.start:s.end], p[start:end])
}

func (u *unknowns) add(p []byte, start, end int) {
	if u == nil {
		return
	}
	h := maphash.Bytes(u.seed, p[start:end])
	s := &u.slots[h%uint64(len(u.slots))]
	s.h, s.start, s.end = h, start, end
}

// tokens tries, in one pass over payload[start:end], each word (between
// whitespace) and each token (between delimiters) long enough to be known.
func (k *Known) tokens(payload []byte, start, end int, try func(int, int) bool) {
	p := payload[:end]
	word, tok := start, start
	for i := start; ; i++ {
		// Most bytes are of no class: a tight loop skips them (a long
		// token at a third of the previous walk's cost).
		for i < len(p) && classes[p[i]] == 0 {
			i++
		}
		class := uint8(space) // the string's end ends a word
		if i < len(p) {
			class = classes[p[i]]
		}
		if i-tok >= MinKnownLen {
			try(tok, i)
		}
		// A word with delimiters inside is a candidate of its own.
		if class == space && tok != word && i-word >= MinKnownLen {
			try(word, i)
		}
		if i == len(p) {
			return
		}
		tok = i + 1
		if class == space {
			word = i + 1
		}
	}
}

// Byte classes of tokens: whitespace ends words and tokens; delimiters, the
// bytes that separate a secret from its context in URLs, headers,
// assignments and JSON escapes (\n, \" …), end tokens. A quote in a JSON
// string is always escaped (\"): both bytes are delimiters, so a value
// quoted inside a string (\"VALUE\") is a token of its own.
const (
	delim = 1
	space = 2
)

var classes = func() (t [256]uint8) {
	for _, c := range []byte("\\\"'`,;:=&?/@()<>[]{}|") {
		t[c] = delim
	}
	for _, c := range []byte(" \t\r\n") {
		t[c] = space
	}
	return t
}()

// Merge is the union of sets: fingerprints under the same key go in one
// group, those under another key in a group of their own.
func Merge(sets ...*Known) *Known {
	out := &Known{}
	for _, k := range sets {
		if k == nil {
			continue
		}
		for _, g := range k.groups {
			var into *group
			for _, o := range out.groups {
				if hmac.Equal(o.key, g.key) {
					into = o
					break
				}
			}
			if into == nil {
				into = &group{key: g.key, of: g.of, sums: make(map[fingerprint.Sum]struct{}, len(g.sums))}
				out.groups = append(out.groups, into)
			}
			for s := range g.sums {
				into.sums[s] = struct{}{}
			}
			for n, ok := range g.lens {
				into.lens[n] = into.lens[n] || ok
				out.lens[n] = out.lens[n] || ok
			}
		}
	}
	return out
}
