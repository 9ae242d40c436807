package secretscan

import (
	"crypto/hmac"
	"fmt"

	"github.com/mcpbus/mcpbus/libs/secretscan/fingerprint"
)

// MinKnownLen is the shortest known value worth looking for: shorter ones
// (a port, "true") would match ordinary text.
const MinKnownLen = fingerprint.MinLen

// maxKnownLen bounds the candidates hashed: a longer value (a PEM key) is
// left to gitleaks' own rules.
const maxKnownLen = fingerprint.MaxLen

// Known is a set of known secret values held as keyed fingerprints
// (fingerprint: truncated HMAC-SHA256 under a key), never as the values: a
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
	sums map[fingerprint.Sum]struct{}
	lens [maxKnownLen + 1]bool
}

// NewKnown fingerprints values under key; values shorter than MinKnownLen
// are left out. A value is added as written and as JSON escapes it, since
// payloads are scanned as JSON text.
func NewKnown(key []byte, values []string) *Known {
	g := &group{key: key, sums: map[fingerprint.Sum]struct{}{}}
	m := fingerprint.New(key)
	for _, v := range values {
		for _, f := range fingerprint.Forms(v) {
			g.sums[m.Of([]byte(f))] = struct{}{}
			g.lens[len(f)] = true
		}
	}
	return &Known{groups: []*group{g}, lens: g.lens}
}

// KnownFromSums is the set of fingerprints made elsewhere under key (the
// credential service's feed): sums holds them end to end, lengths the
// lengths of the texts they were made of.
func KnownFromSums(key []byte, sums []byte, lengths []int) (*Known, error) {
	if len(sums)%fingerprint.Size != 0 {
		return nil, fmt.Errorf("secretscan: %d bytes of fingerprints is not a whole number of %d-byte sums", len(sums), fingerprint.Size)
	}
	g := &group{key: key, sums: make(map[fingerprint.Sum]struct{}, len(sums)/fingerprint.Size)}
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
	makers := make([]*fingerprint.Maker, len(k.groups)) // made when first needed
	try := func(start, end int) bool {
		n := end - start
		if n < MinKnownLen || n > maxKnownLen || !k.lens[n] {
			return false
		}
		for i, g := range k.groups {
			if !g.lens[n] {
				continue
			}
			if makers[i] == nil {
				makers[i] = fingerprint.New(g.key)
			}
			if _, ok := g.sums[makers[i].Of(payload[start:end])]; ok {
				out = append(out, Finding{Rule: RuleKnown, Start: start, End: end})
				return true
			}
		}
		return false
	}
	for i := 0; i < len(payload); i++ {
		if payload[i] != '"' {
			continue
		}
		// A JSON string: find its closing quote.
		start, end := i+1, i+1
		for end < len(payload) && payload[end] != '"' {
			if payload[end] == '\\' {
				end++
			}
			end++
		}
		end = min(end, len(payload))
		i = end
		if try(start, end) {
			continue
		}
		k.tokens(payload, start, end, try)
	}
	return out
}

// tokens tries, in one pass over payload[start:end], each word (between
// whitespace) and each token (between delimiters) long enough to be known.
func (k *Known) tokens(payload []byte, start, end int, try func(int, int) bool) {
	word, tok := start, start
	for i := start; i <= end; i++ {
		c := byte(' ')
		if i < end {
			c = payload[i]
		}
		class := classes[c]
		if class == 0 {
			continue
		}
		if i-tok >= MinKnownLen {
			try(tok, i)
		}
		// A word with delimiters inside is a candidate of its own.
		if class == space && tok != word && i-word >= MinKnownLen {
			try(word, i)
		}
		tok = i + 1
		if class == space {
			word = i + 1
		}
	}
}

// Byte classes of tokens: whitespace ends words and tokens; delimiters, the
// bytes that separate a secret from its context in URLs, headers,
// assignments and JSON escapes (\n, \" …), end tokens.
const (
	delim = 1
	space = 2
)

var classes = func() (t [256]uint8) {
	for _, c := range []byte("\\'`,;:=&?/@()<>[]{}|") {
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
				into = &group{key: g.key, sums: make(map[fingerprint.Sum]struct{}, len(g.sums))}
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
