// Package fingerprint makes the keyed fingerprints of secret values that
// libs/secretscan looks for in payloads: HMAC-SHA256 under a key, truncated
// to 128 bits, of each value as written and as JSON escapes it. It is apart
// from secretscan so that the credential service, which fingerprints every
// stored value for the runners, does not link gitleaks.
package fingerprint

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"hash"
)

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

// Maker fingerprints under one key. Not safe for concurrent use.
type Maker struct {
	m   hash.Hash
	buf [sha256.Size]byte
}

// New returns a maker for key.
func New(key []byte) *Maker { return &Maker{m: hmac.New(sha256.New, key)} }

// Of is b's fingerprint.
func (k *Maker) Of(b []byte) Sum {
	k.m.Reset()
	k.m.Write(b)
	var out Sum
	copy(out[:], k.m.Sum(k.buf[:0]))
	return out
}

// Reset leaves no byte of the last text fingerprinted in k's hash state
// (k may then be kept for later texts).
func (k *Maker) Reset() { k.m.Reset() }

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
