package secretscan

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"hash"
)

// MinKnownLen is the shortest known value worth looking for: shorter ones
// (a port, "true") would match ordinary text.
const MinKnownLen = 8

// maxKnownLen bounds the candidates hashed: a longer value (a PEM key) is
// left to gitleaks' own rules.
const maxKnownLen = 512

// Known is a set of known secret values held as keyed fingerprints
// (HMAC-SHA256 under key), never as the values: a set may be kept, logged
// by accident or sent without giving a value away to whoever lacks the key.
type Known struct {
	key  []byte
	sums map[[sha256.Size]byte]struct{}
	lens [maxKnownLen + 1]bool // lengths of the values: a candidate of another length is not hashed
}

// NewKnown fingerprints values under key; values shorter than MinKnownLen
// are left out. A value is added as written and as JSON escapes it, since
// payloads are scanned as JSON text.
func NewKnown(key []byte, values []string) *Known {
	k := &Known{key: key, sums: map[[sha256.Size]byte]struct{}{}}
	m := hmac.New(sha256.New, key)
	for _, v := range values {
		k.add(m, v)
		if b, err := json.Marshal(v); err == nil && string(b[1:len(b)-1]) != v {
			k.add(m, string(b[1:len(b)-1]))
		}
	}
	return k
}

func (k *Known) add(m hash.Hash, v string) {
	if len(v) < MinKnownLen || len(v) > maxKnownLen {
		return
	}
	k.sums[sum(m, []byte(v))] = struct{}{}
	k.lens[len(v)] = true
}

// Len is the number of fingerprints.
func (k *Known) Len() int {
	if k == nil {
		return 0
	}
	return len(k.sums)
}

func sum(m hash.Hash, b []byte) [sha256.Size]byte {
	m.Reset()
	m.Write(b)
	var out [sha256.Size]byte
	m.Sum(out[:0])
	return out
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
	m := hmac.New(sha256.New, k.key)
	try := func(start, end int) bool {
		n := end - start
		if n < MinKnownLen || n > maxKnownLen || !k.lens[n] {
			return false
		}
		if _, ok := k.sums[sum(m, payload[start:end])]; ok {
			out = append(out, Finding{Rule: RuleKnown, Start: start, End: end})
			return true
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

// Merge is the union of sets fingerprinted under key; sets under another
// key are left out (their fingerprints would never match).
func Merge(key []byte, sets ...*Known) *Known {
	out := &Known{key: key, sums: map[[sha256.Size]byte]struct{}{}}
	for _, k := range sets {
		if k == nil || !hmac.Equal(k.key, key) {
			continue
		}
		for s := range k.sums {
			out.sums[s] = struct{}{}
		}
		for n, ok := range k.lens {
			out.lens[n] = out.lens[n] || ok
		}
	}
	return out
}
