package credclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/serverfile"
)

// Secrets travel to the credential service sealed (nkeys xkeys: X25519 +
// XSalsa20-Poly1305) to its public curve key, which every instance of the
// service shares and mcp.v1.cred.key hands out. Each message is sealed with a
// fresh sender key pair whose private half is dropped at once; the message
// carries the sender's public key so that the service can open it.

// VerbKey is mcp.v1.cred.<VerbKey>: the service's public curve key.
const VerbKey = "key"

// MaxSealed bounds a sealed blob (a record holds a few 64 KiB values at most;
// NATS limits a message to 1 MiB by default anyway).
const MaxSealed = 4 << 20

// SealedField* name the fields a refused sealed message is reported on.
const (
	FieldSealed       = "sealed"
	FieldSenderKey    = "sender_key"
	FieldSealedConfig = "sealed_secrets"
)

// ClearRefused is the message of the VALIDATION_ERROR that refuses secrets
// sent in clear; keySubject is the subject of the service's key
// (mcp.v1.cred.key).
func ClearRefused(field, keySubject string) *apierr.Error {
	return apierr.Invalid(field, "secrets must be sealed to the credential service key ("+keySubject+")")
}

// Seal seals the JSON of creds to recipient (the credential service's public
// curve key) with a fresh sender key. It returns the sealed blob and the
// sender's public key.
func Seal(creds model.Credentials, recipient string) (sealed []byte, senderKey string, err error) {
	plain, err := json.Marshal(creds)
	if err != nil {
		return nil, "", apierr.Wrap(apierr.Internal, "encoding credentials", err)
	}
	defer clear(plain)
	return SealBytes(plain, recipient)
}

// SealBytes seals plain to recipient (any curve public key: the credential
// service's, or one a gateway made for one OAuth flow) with a fresh sender
// key whose private half is wiped at once. It returns the sealed blob and
// the sender's public key, which the recipient needs to open it.
func SealBytes(plain []byte, recipient string) (sealed []byte, senderKey string, err error) {
	if !nkeys.IsValidPublicCurveKey(recipient) {
		return nil, "", apierr.Newf(apierr.Internal, "the recipient key %q is not a curve public key", recipient)
	}
	sender, err := nkeys.CreateCurveKeys()
	if err != nil {
		return nil, "", apierr.Wrap(apierr.Internal, "creating a sender curve key", err)
	}
	defer sender.Wipe()
	pub, err := sender.PublicKey()
	if err != nil {
		return nil, "", apierr.Wrap(apierr.Internal, "sender curve public key", err)
	}
	sealed, err = sender.Seal(plain, recipient)
	if err != nil {
		return nil, "", apierr.Wrap(apierr.Internal, "sealing", err)
	}
	return sealed, pub, nil
}

// Open opens a sealed blob with kp (the credential service's key pair) and
// decodes the credentials it holds, strictly (unknown fields and trailing
// data are refused). Every failure is a VALIDATION_ERROR on field (the field
// of the blob: sealed or sealed_secrets) or on sender_key; no message quotes
// any part of the plain text. keySubject names mcp.v1.cred.key in messages.
func Open(kp nkeys.KeyPair, sealed []byte, senderKey, field, keySubject string) (model.Credentials, error) {
	senderField := FieldSenderKey
	if !nkeys.IsValidPublicCurveKey(senderKey) {
		return model.Credentials{}, apierr.Invalid(senderField, "sender_key must be an nkeys curve public key (X…) that "+field+" was sealed with")
	}
	if len(sealed) == 0 {
		return model.Credentials{}, apierr.Invalid(field, field+" is empty")
	}
	if len(sealed) > MaxSealed {
		return model.Credentials{}, apierr.Invalid(field, fmt.Sprintf("%s is longer than %d bytes", field, MaxSealed))
	}
	plain, err := kp.Open(sealed, senderKey)
	if err != nil {
		return model.Credentials{}, apierr.Wrap(apierr.Validation,
			field+" cannot be opened with the credential service key ("+keySubject+"): it was sealed to another key, with another sender_key, or altered", err).WithField(field)
	}
	defer clear(plain)
	return decodeCredentials(plain, field)
}

// decodeCredentials reads the plain text of a sealed blob: one JSON object of
// credentials, strictly.
func decodeCredentials(plain []byte, field string) (model.Credentials, error) {
	var out model.Credentials
	dec := json.NewDecoder(bytes.NewReader(plain))
	dec.DisallowUnknownFields()
	// The decoder's message may quote the text (a value): never passed on.
	// Nothing but white space may follow (dec.More misses a stray '}' or ']').
	if err := dec.Decode(&out); err != nil || len(bytes.TrimSpace(plain[dec.InputOffset():])) > 0 {
		return model.Credentials{}, apierr.Invalid(field, field+" does not hold a credentials object (env, headers, keyfiles, oauth)")
	}
	return out, nil
}

// Sealer seals secrets to the credential service's key, which it asks for
// once (mcp.v1.cred.key) and keeps until Forget.
type Sealer struct {
	nc   *nats.Conn
	subj bus.Subjects
	mu   sync.Mutex
	key  string
}

// NewSealer returns a sealer for the credential service under prefix.
func NewSealer(nc *nats.Conn, prefix string) *Sealer {
	return &Sealer{nc: nc, subj: bus.NewSubjects(prefix)}
}

// KeySubject is mcp.v1.cred.key under the sealer's prefix.
func (s *Sealer) KeySubject() string { return s.subj.Service("cred", VerbKey) }

// Key returns the credential service's public curve key.
func (s *Sealer) Key(ctx context.Context) (string, error) {
	s.mu.Lock()
	key := s.key
	s.mu.Unlock()
	if key != "" {
		return key, nil
	}
	var out model.CredKeyReply
	if err := bus.RequestJSON(ctx, s.nc, s.KeySubject(), model.CredKeyRequest{}, &out, Timeout); err != nil {
		return "", unreachable(err)
	}
	if !nkeys.IsValidPublicCurveKey(out.PublicKey) {
		return "", apierr.Newf(apierr.Internal, "the credential service answered a key that is not a curve public key")
	}
	s.mu.Lock()
	s.key = out.PublicKey
	s.mu.Unlock()
	return out.PublicKey, nil
}

// SetKey makes the sealer use key (a key known out of band) instead of
// asking the service.
func (s *Sealer) SetKey(key string) {
	s.mu.Lock()
	s.key = key
	s.mu.Unlock()
}

// Forget drops the kept key: the next seal asks for it again (after the
// service refused a blob, e.g. because its key changed).
func (s *Sealer) Forget() {
	s.mu.Lock()
	s.key = ""
	s.mu.Unlock()
}

// Seal seals creds to the service's key.
func (s *Sealer) Seal(ctx context.Context, creds model.Credentials) (sealed []byte, senderKey string, err error) {
	key, err := s.Key(ctx)
	if err != nil {
		return nil, "", err
	}
	return Seal(creds, key)
}

// SealSecrets seals creds for a config request (nothing when creds is empty).
func (s *Sealer) SealSecrets(ctx context.Context, creds model.Credentials) (model.SealedSecrets, error) {
	if creds.Empty() {
		return model.SealedSecrets{}, nil
	}
	sealed, sender, err := s.Seal(ctx, creds)
	if err != nil {
		return model.SealedSecrets{}, err
	}
	names := creds.Names()
	return model.SealedSecrets{Sealed: sealed, SenderKey: sender, Names: &names}, nil
}

// SealConfig moves every secret value out of cfg (ExtractSecrets), merges
// given (which wins on a clash) and seals them: what a config.create or
// config.update request carries instead of clear secrets. A secret written
// into a URL or an argument cannot be moved out (model.RefuseInlineSecrets):
// it is refused here, before the request puts it on the bus.
func (s *Sealer) SealConfig(ctx context.Context, cfg *model.McpConfig, given *model.Credentials) (model.SealedSecrets, error) {
	if e := model.RefuseInlineSecrets(cfg); e != nil {
		return model.SealedSecrets{}, e
	}
	return s.SealSecrets(ctx, ExtractSecrets(cfg, given))
}

// StaleKey reports whether err is the credential service refusing a blob it
// cannot open (sealed to a key it no longer holds, most likely): sealing
// again with a fresh key may succeed.
func StaleKey(err error) bool {
	var e *apierr.Error
	if !errors.As(err, &e) || e.Code != apierr.Validation {
		return false
	}
	f := e.Field
	return (f == FieldSealed || f == FieldSealedConfig || strings.HasSuffix(f, "."+FieldSealedConfig)) &&
		strings.Contains(e.Message, "cannot be opened")
}

// SealImport parses an import's Content (with Format and Vars) as the config
// service would and returns the request to send instead: Entries, each
// config with no secret value left in it and its secrets sealed; no Content
// and no Vars (their values may be secrets). A request that already has
// Entries, or no content, is returned as it is.
func (s *Sealer) SealImport(ctx context.Context, req model.ConfigImportRequest) (model.ConfigImportRequest, error) {
	if len(req.Entries) > 0 || strings.TrimSpace(req.Content) == "" {
		return req, nil
	}
	entries, err := serverfile.Parse(req.Format, []byte(req.Content), req.Vars)
	if err != nil {
		if e := apierr.From(err); e.Code != apierr.Internal {
			return req, e
		}
		return req, apierr.Invalid("content", err.Error())
	}
	if len(entries) == 0 {
		return req, apierr.Invalid("content", "the file has no servers")
	}
	out := model.ConfigImportRequest{Replace: req.Replace, Enabled: req.Enabled, Entries: make([]model.ConfigImportEntry, len(entries))}
	for i, e := range entries {
		cfg, secrets := e.Config, e.Secrets
		sealed, err := s.SealConfig(ctx, &cfg, &secrets)
		if err != nil {
			return req, err
		}
		out.Entries[i] = model.ConfigImportEntry{Config: cfg, SealedSecrets: sealed}
	}
	return out, nil
}
