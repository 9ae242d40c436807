// Package fingerprint makes the keyed fingerprints of secret values that
// libs/secretscan looks for in payloads: SipHash-2-4 with a 128-bit output
// (a PRF built for short inputs) under a key, of each value as written and
// as JSON escapes it. It is apart from secretscan so that the credential
// service, which fingerprints every stored value for the runners, does not
// link gitleaks.
package fingerprint

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"

	"github.com/dchest/siphash"
)

// Alg names how fingerprints are made: a feed made another way (by a
// credential service of another version) is refused, not misread.
// HMAC-SHA256, before, cost ~400 ns a candidate: text of many distinct
// words or ids of a stored value's length spent most of its scan there.
const Alg = "siphash-2-4-128"

// Size is a fingerprint's length: 128 bits leave a chance collision
// between a payload's candidates and a set of any size out of reach.
const Size = 16

// MinLen is the shortest value worth looking for: shorter ones (a port,
// "true") would match ordinary text. MaxLen bounds the candidates hashed: a
// longer value (a PEM key) is left to gitleaks' own rules.
const (
	MinLen = 8
	MaxLen = 512
)

// Sum is one fingerprint.
type Sum [Size]byte

// Maker fingerprints under one key: SipHash's 128-bit key, the first half
// of SHA-256 of the given key (of any length). A Maker holds no text.
type Maker struct{ k0, k1 uint64 }

// New returns a maker for key.
func New(key []byte) Maker {
	d := sha256.Sum256(key)
	return Maker{k0: binary.LittleEndian.Uint64(d[0:8]), k1: binary.LittleEndian.Uint64(d[8:16])}
}

// Of is b's fingerprint.
func (k Maker) Of(b []byte) Sum {
	lo, hi := siphash.Hash128(k.k0, k.k1, b)
	var out Sum
	binary.LittleEndian.PutUint64(out[0:8], lo)
	binary.LittleEndian.PutUint64(out[8:16], hi)
	return out
}

// Forms are the texts value appears as in a JSON payload (as written, and
// JSON-escaped when that differs) whose length is in [MinLen, MaxLen].
func Forms(value string) []string {
	var out []string
	if len(value) >= MinLen && len(value) <= MaxLen {
		out = append(out, value)
	}
	if b, err := json.Marshal(value); err == nil {
		if esc := string(b[1 : len(b)-1]); esc != value && len(esc) >= MinLen && len(esc) <= MaxLen {
			out = append(out, esc)
		}
	}
	return out
}
