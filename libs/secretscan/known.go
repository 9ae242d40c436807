package secretscan

import (
	"bytes"
	"crypto/hmac"
	"encoding/binary"
	"fmt"
	"math/rand/v2"

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
	// shortest is the shortest of lens: a word shorter holds no candidate
	// (the walk does not stop at its end).
	shortest int
}

// withLens is k with lens set and shortest derived from them.
func (k *Known) withLens(lens [maxKnownLen + 1]bool) *Known {
	k.lens, k.shortest = lens, maxKnownLen+1
	for n, ok := range lens {
		if ok {
			k.shortest = n
			break
		}
	}
	return k
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
	return (&Known{groups: []*group{g}}).withLens(g.lens)
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
	return (&Known{groups: []*group{g}}).withLens(g.lens), nil
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

// tryer hashes one payload's candidates (walk.go finds them): only those
// of a known length, so the cost grows with the payload, not the set.
type tryer struct {
	k       *Known
	payload []byte
	found   []Finding
	unknown *unknowns // made once a few candidates were hashed
	hashed  int
	spare   *unknowns // the scan's pooled one, used then (nil: one is made)
}

// try reports whether payload[start:end] is a known value, adding it to
// found if so.
func (t *tryer) try(start, end int) bool {
	n := end - start
	if n < MinKnownLen || n > maxKnownLen || !t.k.lens[n] {
		return false
	}
	if t.unknown.has(t.payload, start, end) {
		return false
	}
	for _, g := range t.k.groups {
		if !g.lens[n] {
			continue
		}
		if _, ok := g.sums[g.of.Of(t.payload[start:end])]; ok {
			t.found = append(t.found, Finding{Rule: RuleKnown, Start: start, End: end})
			return true
		}
	}
	if t.hashed++; t.hashed == 8 {
		if t.unknown = t.spare; t.unknown == nil {
			t.unknown = new(unknowns)
		}
		// Cleared: a slot of an earlier scan (another payload, maybe
		// another known set) must not answer for this one.
		*t.unknown = unknowns{seed: rand.Uint64(), used: true}
	}
	t.unknown.add(t.payload, start, end)
	return false
}

// unknowns remembers candidates a scan hashed and found in no group, by
// their place in the payload (no copy of them is made): text repeats (the
// words of prose, field names), and a lookup here costs less than a
// fingerprint per group and a map lookup each. A slot per hash, the last
// candidate kept. A candidate (MinKnownLen bytes or more) is looked up by
// its first and last eight bytes, which are the whole of one of 16 bytes or
// fewer (most words): two loads and a multiply, no call; a longer one's
// middle is compared too. The seed is drawn per scan: text made to share a
// slot costs a fingerprint a candidate, as distinct candidates do.
type unknowns struct {
	seed  uint64
	used  bool // since made or cleared
	slots [256]struct {
		head, tail uint64 // the candidate's first and last eight bytes
		start, end int
	}
}

// key reads eight bytes from each end of a candidate.
const _ = uint(MinKnownLen - 8)

// key is the first and last eight bytes of p[start:end] (at least eight
// bytes) and its slot.
func (u *unknowns) key(p []byte, start, end int) (head, tail uint64, slot int) {
	head = binary.LittleEndian.Uint64(p[start:])
	tail = binary.LittleEndian.Uint64(p[end-8:])
	h := ((head^u.seed)*0x9e3779b97f4a7c15 ^ tail ^ uint64(end-start)) * 0xc2b2ae3d27d4eb4f
	return head, tail, int(h >> 56)
}

func (u *unknowns) has(p []byte, start, end int) bool {
	if u == nil {
		return false
	}
	head, tail, i := u.key(p, start, end)
	s := &u.slots[i]
	if s.end-s.start != end-start || s.head != head || s.tail != tail {
		return false // an empty slot's length, 0, is no candidate's
	}
	return end-start <= 16 || bytes.Equal(p[s.start+8:s.end-8], p[start+8:end-8])
}

func (u *unknowns) add(p []byte, start, end int) {
	if u == nil {
		return
	}
	head, tail, i := u.key(p, start, end)
	s := &u.slots[i]
	s.head, s.tail, s.start, s.end = head, tail, start, end
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
	return out.withLens(out.lens)
}
