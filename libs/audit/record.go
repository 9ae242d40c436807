// Package audit is the tamper-evident audit trail: every audited event is
// appended to a chain of its writer (one chain per service identity),
// carrying the hash of the chain's previous record and an ed25519
// signature by the writer's nkey, in the append-only stream MCP_AUDIT
// (docs/security.md, "Tamper-evident audit").
package audit

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nkeys"
)

// Version is the record format (and the first line of the canonical bytes).
const Version = 1

// Record is one audited event in its chain (schemas/audit-record.json).
type Record struct {
	V int `json:"v"`
	// Chain is "<role>.<public nkey>" of the writer; its subject is
	// <prefix>.audit.<chain>.
	Chain string `json:"chain"`
	// Seq counts the chain's records from 1.
	Seq uint64 `json:"seq"`
	// Prev is the hash of the chain's record Seq-1 ("" for Seq 1).
	Prev string    `json:"prev"`
	Time time.Time `json:"time"`
	// Events are the audited events, in the order they were published
	// (one record holds the events queued while the previous was stored).
	Events []Event `json:"events"`
	// Hash is hex SHA-256 of Canonical; Sig the writer's ed25519
	// signature of those 32 bytes, base64url without padding.
	Hash string `json:"hash"`
	Sig  string `json:"sig"`
}

// Event is one audited event: its subject and JSON as published.
type Event struct {
	Subject string          `json:"subject"`
	Event   json.RawMessage `json:"event"`
}

// Canonical is what a record's hash covers, one field a line (none may
// hold a newline):
//
//	mcpbus-audit-v1
//	<chain>
//	<seq, decimal>
//	<prev, hex or empty>
//	<time, RFC 3339 with nanoseconds, UTC>
//	<number of events, decimal>
//	then for each event: <subject> and <hex SHA-256 of the event's bytes>
func (r *Record) Canonical() []byte {
	var b strings.Builder
	b.WriteString("mcpbus-audit-v" + strconv.Itoa(Version) + "\n")
	line := func(f string) {
		b.WriteString(f)
		b.WriteByte('\n')
	}
	for _, f := range []string{r.Chain, strconv.FormatUint(r.Seq, 10), r.Prev, r.Time.UTC().Format(time.RFC3339Nano), strconv.Itoa(len(r.Events))} {
		line(f)
	}
	for _, e := range r.Events {
		h := sha256.Sum256(e.Event)
		line(e.Subject)
		line(hex.EncodeToString(h[:]))
	}
	return []byte(b.String())
}

// Digest is the SHA-256 of the canonical bytes.
func (r *Record) Digest() []byte {
	h := sha256.Sum256(r.Canonical())
	return h[:]
}

// ChainOf is the chain name of a writer: its role and public key.
func ChainOf(role, publicKey string) string { return role + "." + publicKey }

// SplitChain is the role and public key a chain name holds.
func SplitChain(chain string) (role, key string, ok bool) {
	role, key, ok = strings.Cut(chain, ".")
	return role, key, ok && role != "" && nkeys.IsValidPublicUserKey(key)
}

// signer signs a record's digest: an nkeys.KeyPair, or the seedSigner of one.
type signer interface {
	Sign(input []byte) ([]byte, error)
}

// seedSigner signs with the ed25519 key of an nkey's seed, derived once.
// nkeys derives it from the seed again on every Sign (a scalar
// multiplication, half of a signature's cost), and a writer signs a record
// every few milliseconds under load. Its signatures are the nkey's: ed25519
// signing is deterministic.
type seedSigner ed25519.PrivateKey

func (k seedSigner) Sign(input []byte) ([]byte, error) {
	return ed25519.Sign(ed25519.PrivateKey(k), input), nil
}

// signerOf is kp's signer: a seedSigner when kp holds its seed.
func signerOf(kp nkeys.KeyPair) signer {
	seed, err := kp.Seed()
	if err != nil {
		return kp
	}
	_, raw, err := nkeys.DecodeSeed(seed)
	if err != nil || len(raw) != ed25519.SeedSize {
		return kp
	}
	return seedSigner(ed25519.NewKeyFromSeed(raw))
}

// seal fills Hash and Sig with kp's signature.
func (r *Record) seal(kp signer) error {
	if strings.ContainsAny(r.Chain+r.Prev, "\n") {
		return errors.New("audit: a newline in a record's fields")
	}
	for _, e := range r.Events {
		if strings.ContainsAny(e.Subject, "\n") {
			return errors.New("audit: a newline in an event's subject")
		}
	}
	d := r.Digest()
	sig, err := kp.Sign(d)
	if err != nil {
		return fmt.Errorf("audit: signing: %w", err)
	}
	r.Hash, r.Sig = hex.EncodeToString(d), base64.RawURLEncoding.EncodeToString(sig)
	return nil
}

// checkSig says whether Sig is the signature of the record's canonical
// bytes by the key its chain names.
func (r *Record) checkSig() bool {
	_, key, ok := SplitChain(r.Chain)
	if !ok {
		return false
	}
	pub, err := nkeys.FromPublicKey(key)
	if err != nil {
		return false
	}
	sig, err := base64.RawURLEncoding.DecodeString(r.Sig)
	if err != nil {
		return false
	}
	return pub.Verify(r.Digest(), sig) == nil
}
