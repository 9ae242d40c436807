package mcpserver

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// The requestState of a multi round-trip result (SEP-2322) names the bus
// call the gateway holds for the client. The client keeps it between rounds
// and may tamper with it, and the gateway authenticates nobody's state but
// its own ("unauthenticated servers must encrypt, sign and verify this
// value"): it is sealed with AES-GCM under a random key of this gateway
// instance, which never leaves the process, and binds the held call to its
// caller (the view key: API key or token subject, and its tool filter), its
// tool, its round and its expiry. The instance id travels in clear before
// the sealed part (and is authenticated as its associated data), so a retry
// that reached another instance is passed on to the holder (mrtrforward.go).

// roundState is what a requestState carries.
type roundState struct {
	Call    string `json:"c"` // held call id
	Owner   string `json:"o"` // view key of the caller
	Tool    string `json:"t"` // exposed tool name
	Round   int    `json:"r"` // the round whose input requests it answers
	Expires int64  `json:"e"` // unix milliseconds
}

// stateSealer seals and opens the requestStates of one gateway instance.
type stateSealer struct {
	instance string
	aead     cipher.AEAD
}

// newStateSealer makes a sealer with a fresh random key and instance id.
func newStateSealer() (*stateSealer, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("requestState key: %w", err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("requestState key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("requestState key: %w", err)
	}
	return &stateSealer{instance: strings.ToLower(rand.Text()[:16]), aead: aead}, nil
}

// seal encodes st as "<instance>.<base64url(nonce|ciphertext)>".
func (s *stateSealer) seal(st roundState) (string, error) {
	plain, err := json.Marshal(st)
	if err != nil {
		return "", fmt.Errorf("encoding requestState: %w", err)
	}
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(plain)+s.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("requestState nonce: %w", err)
	}
	sealed := s.aead.Seal(nonce, nonce, plain, []byte(s.instance))
	return s.instance + "." + base64.RawURLEncoding.EncodeToString(sealed), nil
}

// Why a requestState is refused.
var (
	errStateForged  = apierr.Invalid("requestState", "requestState is not one this gateway issued (altered, truncated, or from before a gateway restart): call the tool again without it")
	errStateExpired = apierr.Invalid("requestState", "requestState has expired (the call's time ran out): call the tool again without it")
)

// otherInstance returns the instance that sealed state when it is another
// well-formed instance id than this one's (a retry to pass on to it).
func (s *stateSealer) otherInstance(state string) (string, bool) {
	instance, _, ok := strings.Cut(state, ".")
	if !ok || instance == s.instance || !instanceID.MatchString(instance) {
		return "", false
	}
	return instance, true
}

// instanceID is the form of an instance id (a subject token: no wildcard).
var instanceID = regexp.MustCompile(`^[a-z2-7]{16}$`)

// open verifies and decodes a requestState sealed by this instance. A state
// of another instance gets an error that says so: held calls live in the
// instance that made them.
func (s *stateSealer) open(state string, now time.Time) (roundState, *apierr.Error) {
	var st roundState
	instance, body, ok := strings.Cut(state, ".")
	if !ok {
		return st, errStateForged
	}
	if instance != s.instance {
		return st, errStateForged
	}
	sealed, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil || len(sealed) < s.aead.NonceSize() {
		return st, errStateForged
	}
	nonce, ciphertext := sealed[:s.aead.NonceSize()], sealed[s.aead.NonceSize():]
	plain, err := s.aead.Open(nil, nonce, ciphertext, []byte(s.instance))
	if err != nil || json.Unmarshal(plain, &st) != nil || st.Call == "" {
		return roundState{}, errStateForged
	}
	if now.UnixMilli() >= st.Expires {
		return st, errStateExpired
	}
	return st, nil
}
