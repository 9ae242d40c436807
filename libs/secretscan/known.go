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
		k.split(payload, start, end, isSpace, func(ws, we int) {
			if try(ws, we) {
				return
			}
			k.split(payload, ws, we, isDelim, func(ts, te int) { try(ts, te) })
		})
	}
	return out
}

// split calls f with each run of payload[start:end] between cut bytes.
func (k *Known) split(payload []byte, start, end int, cut func(byte) bool, f func(int, int)) {
	s := start
	for i := start; i <= end; i++ {
		if i == end || cut(payload[i]) {
			if i-s >= MinKnownLen {
				f(s, i)
			}
			s = i + 1
		}
	}
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\r' || b == '\n' }

// isDelim is true for the bytes that separate a secret from its context in
// URLs, headers, assignments and JSON escapes (\n, \" …).
func isDelim(b byte) bool {
	switch b {
	case ' ', '\t', '\r', '\n', '\\', '\'', '`', ',', ';', ':', '=', '&', '?', '/', '@', '(', ')', '<', '>', '[', ']', '{', '}', '|':
		return true
	}
	return false
}

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
