package credential_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nkeys"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/credential/credential"
	"github.com/mcpbus/mcpbus/services/credential/store"
	"github.com/mcpbus/mcpbus/services/credential/store/filestore"
)

const clearRefused = "secrets must be sealed to the credential service key (mcp.v1.cred.key)"

// The public key is on cred.key and in the micro metadata; the pair is kept
// in <store dir>/curve.xk (0600) and survives a restart.
func TestKeyDiscoveryAndPersistence(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	raw, apiErr := e.raw("key", struct{}{})
	if apiErr != nil {
		t.Fatal(apiErr)
	}
	var reply model.CredKeyReply
	if err := json.Unmarshal(raw, &reply); err != nil || !nkeys.IsValidPublicCurveKey(reply.PublicKey) {
		t.Fatalf("cred.key: %s %v", raw, err)
	}
	if pub, err := e.svc.PublicKey(ctx); err != nil || pub != reply.PublicKey {
		t.Fatalf("service key %q %v, cred.key %q", pub, err, reply.PublicKey)
	}
	info, err := e.nc.Request("$SRV.INFO."+credential.ServiceName, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var si struct {
		Metadata map[string]string `json:"metadata"`
	}
	if err := json.Unmarshal(info.Data, &si); err != nil || si.Metadata["public_key"] != reply.PublicKey {
		t.Fatalf("$SRV.INFO metadata: %s %v", info.Data, err)
	}
	path := filepath.Join(e.store.Dir(), credential.KeyFile)
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v %v", path, st, err)
	}
	if _, apiErr := e.raw("key", map[string]any{"extra": 1}); apiErr == nil || apiErr.Code != apierr.Validation {
		t.Fatalf("cred.key with an unknown field: %v", apiErr)
	}
	// A second instance on the same directory (another process sharing the
	// data dir) has the same pair: what was sealed for one opens in the other.
	st2, err := filestore.New(e.store.Dir())
	if err != nil {
		t.Fatal(err)
	}
	svc2, err := credential.New(e.nc, credential.Options{Store: st2, Logger: slog.New(slog.DiscardHandler), AnyResolver: true})
	if err != nil {
		t.Fatal(err)
	}
	if pub, err := svc2.PublicKey(ctx); err != nil || pub != reply.PublicKey {
		t.Fatalf("second instance key %q %v, want %q", pub, err, reply.PublicKey)
	}
	// A key file others can read stops the service.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	svc3, err := credential.New(e.nc, credential.Options{Store: st2, Logger: slog.New(slog.DiscardHandler), AnyResolver: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc3.Run(ctx); err == nil || !strings.Contains(err.Error(), "accessible by group or others") {
		t.Fatalf("Run with a loose curve key: %v", err)
	}
}

// memStore is a store.Store other than the file store (Vault's path: the
// pair is kept as a reserved record).
type memStore struct {
	mu   sync.Mutex
	recs map[string]model.Credentials
	at   map[string]time.Time
}

func (m *memStore) Get(_ context.Context, id string) (model.Credentials, time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.recs[id]
	if !ok {
		return model.Credentials{}, time.Time{}, store.ErrNotFound
	}
	return c, m.at[id], nil
}

func (m *memStore) Put(_ context.Context, id string, c model.Credentials) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recs[id], m.at[id] = c, time.Now()
	return nil
}

func (m *memStore) Delete(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.recs, id)
	return nil
}

func (m *memStore) Name() string { return "vault" }

// Instances on a shared store other than files agree on one pair even when
// they start together.
func TestKeySharedThroughStore(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	shared := &memStore{recs: map[string]model.Credentials{}, at: map[string]time.Time{}}
	keys := make([]string, 4)
	var wg sync.WaitGroup
	for i := range keys {
		svc, err := credential.New(e.nc, credential.Options{Store: shared, KeySettle: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler), AnyResolver: true})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			keys[i], _ = svc.PublicKey(ctx)
		}()
	}
	wg.Wait()
	for _, k := range keys {
		if k == "" || k != keys[0] {
			t.Fatalf("instances hold different keys: %v", keys)
		}
	}
	rec, _, err := shared.Get(ctx, credential.KeyRecordID)
	if err != nil || len(rec.Env) != 1 {
		t.Fatalf("key record: %v %v", len(rec.Env), err)
	}
}

// Clear secrets, blobs sealed to another key, altered blobs, bad sender keys,
// names that do not match and plain text that is not credentials are all a
// VALIDATION_ERROR that changes nothing; the reserved key record is no
// server's.
func TestSealedSetRefusals(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	id := uuid.NewString()
	if _, err := e.client.Set(ctx, model.CredSetRequest{ServerID: id, Credentials: model.Credentials{Env: map[string]string{"KEEP": secretEnv}}}); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(e.store.Path(store.Key(model.CredServer, id)))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := e.svc.PublicKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	creds := model.Credentials{Env: map[string]string{"NEW": secretHeader}}
	good, sender, err := credclient.Seal(creds, pub)
	if err != nil {
		t.Fatal(err)
	}
	stranger, _ := nkeys.CreateCurveKeys()
	strangerPub, _ := stranger.PublicKey()
	other, otherSender, _ := credclient.Seal(creds, strangerPub)
	tampered := append([]byte(nil), good...)
	tampered[len(tampered)-3] ^= 1
	notCreds, notCredsSender, _ := sealRaw(t, []byte(`{"env":{"NEW":"`+secretHeader+`"},"values":1}`), pub)
	set := func(sealed []byte, sender string) model.CredSetRequest {
		return model.CredSetRequest{ServerID: id, Sealed: sealed, SenderKey: sender}
	}
	withNames := set(good, sender)
	withNames.Names = &model.SecretNames{Env: []string{"OTHER"}}
	cases := []struct {
		name   string
		body   any
		field  string
		substr string
	}{
		{"clear credentials", []byte(`{"server_id":"` + id + `","credentials":{"env":{"NEW":"` + secretHeader + `"}}}`), "credentials", clearRefused},
		{"sealed to another key", set(other, otherSender), "sealed", "cannot be opened"},
		{"altered", set(tampered, sender), "sealed", "cannot be opened"},
		{"other sender key", set(good, otherSender), "sealed", "cannot be opened"},
		{"bad sender key", set(good, "Xnope"), "sender_key", "sender_key must be"},
		{"no sender key", set(good, ""), "sender_key", "sender_key must be"},
		{"sender key without blob", set(nil, sender), "sealed", "sender_key without sealed"},
		{"not credentials", set(notCreds, notCredsSender), "sealed", "does not hold a credentials object"},
		{"names that do not match", withNames, "names", "do not match"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.raw("set", c.body)
			if err == nil || err.Code != apierr.Validation || err.Field != c.field || !strings.Contains(err.Message, c.substr) {
				t.Fatalf("got %v (field %q), want VALIDATION_ERROR on %s with %q", err, fieldOf(err), c.field, c.substr)
			}
			if strings.Contains(err.Message, secretHeader) {
				t.Fatalf("the error quotes the secret: %s", err.Message)
			}
			after, rerr := os.ReadFile(e.store.Path(store.Key(model.CredServer, id)))
			if rerr != nil || !bytes.Equal(before, after) {
				t.Fatalf("the record changed: %v", rerr)
			}
		})
	}
	// A dry run checks and writes nothing.
	dry := set(good, sender)
	dry.DryRun = true
	if _, err := e.raw("set", dry); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(e.store.Path(store.Key(model.CredServer, id))); !bytes.Equal(before, after) {
		t.Fatal("a dry run wrote")
	}
	// The good blob is stored.
	if _, err := e.raw("set", set(good, sender)); err != nil {
		t.Fatal(err)
	}
	if got, _, err := e.store.Get(ctx, store.Key(model.CredServer, id)); err != nil || got.Env["NEW"] != secretHeader || got.Env["KEEP"] != secretEnv {
		t.Fatalf("stored %v", err)
	}
	// The key pair's own record id belongs to no server.
	for _, verb := range []string{"set", "describe", "delete", "resolve"} {
		body := map[string]any{"server_id": credential.KeyRecordID}
		if verb == "resolve" {
			body["recipient_key"] = strangerPub
		}
		if _, err := e.raw(verb, body); err == nil || err.Code != apierr.Validation || err.Field != "server_id" {
			t.Errorf("%s of the reserved id: %v", verb, err)
		}
	}
}

func fieldOf(err *apierr.Error) string {
	if err == nil {
		return ""
	}
	return err.Field
}

// sealRaw seals any plain text to recipient.
func sealRaw(t *testing.T, plain []byte, recipient string) ([]byte, string, error) {
	t.Helper()
	kp, err := nkeys.CreateCurveKeys()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	sealed, err := kp.Seal(plain, recipient)
	return sealed, pub, err
}

// The client asks for the key again when the service's key changed.
func TestClientResealsAfterKeyChange(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	id := uuid.NewString()
	// The client keeps a key the service does not hold.
	c := credclient.New(e.nc, "")
	stale, _ := nkeys.CreateCurveKeys()
	stalePub, _ := stale.PublicKey()
	c.Sealer().SetKey(stalePub)
	if _, err := c.Set(ctx, model.CredSetRequest{ServerID: id, Credentials: model.Credentials{Env: map[string]string{"A": secretEnv}}}); err != nil {
		t.Fatal(err)
	}
	if got, _, err := e.store.Get(ctx, store.Key(model.CredServer, id)); err != nil || got.Env["A"] != secretEnv {
		t.Fatalf("stored: %v", err)
	}
}
