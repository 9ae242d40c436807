package vaultstore_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	vault "github.com/hashicorp/vault/api"
	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/libs/vaulttest"
	"github.com/mcpbus/mcpbus/services/credential/credential"
	"github.com/mcpbus/mcpbus/services/credential/store"
	"github.com/mcpbus/mcpbus/services/credential/store/vaultstore"
)

// policy is what deploy/vault gives the credential service: its own subtree
// of the KV v2 mount and nothing else.
const policy = `
path "secret/data/mcpbus/*" {
  capabilities = ["create", "read", "update", "delete"]
}
path "secret/metadata/mcpbus/*" {
  capabilities = ["read", "list", "delete"]
}
`

const secretValue = "ghp_vaultSecretValue42"

type vaultEnv struct {
	srv  *vaulttest.Server
	root *vault.Client
}

func startVault(t *testing.T) *vaultEnv {
	t.Helper()
	srv := vaulttest.Start(t) // stopped when the test ends
	cfg := vault.DefaultConfig()
	cfg.Address = srv.Addr
	root, err := vault.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	root.SetToken(srv.Token)
	if err := root.Sys().PutPolicy("mcpbus", policy); err != nil {
		t.Fatal(err)
	}
	return &vaultEnv{srv: srv, root: root}
}

// token creates a token with the mcpbus policy only (plus Vault's default
// policy, which lets a token look itself up and renew itself).
func (v *vaultEnv) token(t *testing.T, ttl, maxTTL string, policies ...string) string {
	t.Helper()
	if policies == nil {
		policies = []string{"mcpbus"}
	}
	renewable := true
	sec, err := v.root.Auth().Token().Create(&vault.TokenCreateRequest{Policies: policies, TTL: ttl, ExplicitMaxTTL: maxTTL, Renewable: &renewable})
	if err != nil {
		t.Fatal(err)
	}
	return sec.Auth.ClientToken
}

func (v *vaultEnv) client(t *testing.T, token string) *vault.Client {
	t.Helper()
	cfg := vault.DefaultConfig()
	cfg.Address = v.srv.Addr
	cfg.MaxRetries = 0
	c, err := vault.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.SetToken(token)
	return c
}

func (v *vaultEnv) store(t *testing.T, cfg vaultstore.Config) *vaultstore.Store {
	t.Helper()
	cfg.Address = v.srv.Addr
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := vaultstore.New(ctx, cfg, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// startNATS starts an in-process NATS server (no listener), stopped when t
// ends.
func startNATS(t *testing.T) *embednats.Server {
	t.Helper()
	ns, err := embednats.Start(embednats.Options{InProcessOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	return ns
}

// newCred makes a credential service instance on st, on its own connection
// to ns (as each instance of a split deployment has), without running it.
// Any caller may resolve unless tweak says otherwise.
func newCred(t *testing.T, ns *embednats.Server, st store.Store, tweak ...func(*credential.Options)) *credential.Service {
	t.Helper()
	opts := credential.Options{Store: st, Logger: quietLog(), AnyResolver: true}
	for _, f := range tweak {
		f(&opts)
	}
	svc, err := credential.New(testkit.Connect(t, ns), opts)
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// serveCred is newCred, running the instance until t ends.
func serveCred(t *testing.T, ns *embednats.Server, st store.Store, tweak ...func(*credential.Options)) *credential.Service {
	t.Helper()
	svc := newCred(t, ns, st, tweak...)
	testkit.RunService(t, svc)
	return svc
}

// credOnVault runs a credential service on st over its own embedded NATS
// and returns a client's connection to that NATS.
func credOnVault(t *testing.T, st store.Store, tweak ...func(*credential.Options)) *nats.Conn {
	t.Helper()
	ns := startNATS(t)
	serveCred(t, ns, st, tweak...)
	return testkit.Connect(t, ns)
}

func sample() model.Credentials {
	return model.Credentials{
		Env:      map[string]string{"GITHUB_TOKEN": secretValue},
		Headers:  map[string]string{"Authorization": "Bearer " + secretValue},
		Keyfiles: map[string]string{"KEY": "/etc/key"},
		OAuth: &model.OAuthToken{AccessToken: "acc", RefreshToken: "ref", ExpiresAt: time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC),
			Scopes: []string{"a", "b"}, TokenURL: "https://example.com/token", EnvVar: "OAUTH"},
	}
}

func statusOf(err error) int {
	var re *vault.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode
	}
	return 0
}

func TestRoundTripUnderPolicy(t *testing.T) {
	t.Parallel() // each test has its own Vault
	v := startVault(t)
	ctx := ctxT(t)
	tok := v.token(t, "1h", "")
	s := v.store(t, vaultstore.Config{Token: tok})
	if s.Name() != "vault" {
		t.Errorf("Name = %q", s.Name())
	}
	id := uuid.NewString()
	if _, _, err := s.Get(ctx, id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get of a missing record: %v", err)
	}
	before := time.Now().Add(-5 * time.Second)
	want := sample()
	if err := s.Put(ctx, id, want); err != nil {
		t.Fatal(err)
	}
	got, updated, err := s.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
	}
	if updated.Before(before) || updated.After(time.Now().Add(5*time.Second)) {
		t.Errorf("updated_at %v", updated)
	}
	// The record sits at secret/mcpbus/<id>, readable by an operator with the vault CLI.
	raw, err := v.root.KVv2("secret").Get(ctx, "mcpbus/"+id)
	if err != nil {
		t.Fatal(err)
	}
	if env, _ := raw.Data["env"].(map[string]any); env["GITHUB_TOKEN"] != secretValue {
		t.Fatalf("record in Vault: %v", raw.Data)
	}
	// A kind's record sits in the kind's folder, under the same policy.
	kindKey := store.Key(model.CredChatProfile, id)
	if err := s.Put(ctx, kindKey, want); err != nil {
		t.Fatal(err)
	}
	if raw, err := v.root.KVv2("secret").Get(ctx, "mcpbus/chat_profile/"+id); err != nil || raw.Data["env"] == nil {
		t.Fatalf("a kind's record in Vault: %v", err)
	}
	// Both are listed (the fingerprint feed reads every record), under the policy.
	if keys, err := s.List(ctx); err != nil || !slices.Contains(keys, id) || !slices.Contains(keys, kindKey) {
		t.Fatalf("List: %v %v", keys, err)
	}
	if err := s.Delete(ctx, kindKey); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(ctx, kindKey); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a deleted kind's record: %v", err)
	}
	// A Put replaces the whole record.
	if err := s.Put(ctx, id, model.Credentials{Env: map[string]string{"ONLY": "x"}}); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := s.Get(ctx, id); !reflect.DeepEqual(got, model.Credentials{Env: map[string]string{"ONLY": "x"}}) {
		t.Fatalf("after replace: %+v", got)
	}

	// The policy holds: the same token is refused anywhere else.
	c := v.client(t, tok)
	if _, err := c.KVv2("secret").Put(ctx, "other/"+id, map[string]any{"a": "b"}); statusOf(err) != http.StatusForbidden {
		t.Fatalf("write outside mcpbus/: %v", err)
	}
	if _, err := c.KVv2("secret").Get(ctx, "mcpbus-other"); statusOf(err) != http.StatusForbidden {
		t.Fatalf("read outside mcpbus/: %v", err)
	}
	if err := c.Sys().PutPolicy("escalate", `path "*" { capabilities = ["sudo"] }`); statusOf(err) != http.StatusForbidden {
		t.Fatalf("policy write: %v", err)
	}
	// A token without the policy gets UNAUTHORIZED naming the path, not the token.
	weak := v.token(t, "1h", "", "default")
	ws := v.store(t, vaultstore.Config{Token: weak})
	err = ws.Put(ctx, id, sample())
	e := apierr.From(err)
	if e.Code != apierr.Unauthorized || !strings.Contains(e.Message, "secret/data/mcpbus/"+id) || strings.Contains(e.Message, weak) {
		t.Fatalf("weak token: %v", err)
	}
	if got, _, _ := s.Get(ctx, id); !reflect.DeepEqual(got, model.Credentials{Env: map[string]string{"ONLY": "x"}}) {
		t.Fatalf("a refused write changed the record: %+v", got)
	}
}

func TestDeleteRemovesAllVersions(t *testing.T) {
	t.Parallel() // each test has its own Vault
	v := startVault(t)
	ctx := ctxT(t)
	s := v.store(t, vaultstore.Config{Token: v.token(t, "1h", "")})
	id := uuid.NewString()
	for i := range 3 {
		if err := s.Put(ctx, id, model.Credentials{Env: map[string]string{"V": strings.Repeat("x", i+1)}}); err != nil {
			t.Fatal(err)
		}
	}
	kv := v.root.KVv2("secret")
	versions, err := kv.GetVersionsAsList(ctx, "mcpbus/"+id)
	if err != nil || len(versions) != 3 {
		t.Fatalf("versions before delete: %v, %v", versions, err)
	}
	if err := s.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(ctx, id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get after Delete: %v", err)
	}
	if _, err := kv.GetMetadata(ctx, "mcpbus/"+id); !errors.Is(err, vault.ErrSecretNotFound) {
		t.Fatalf("metadata still there: %v", err)
	}
	for ver := 1; ver <= 3; ver++ {
		if sec, err := kv.GetVersion(ctx, "mcpbus/"+id, ver); !errors.Is(err, vault.ErrSecretNotFound) && (err != nil || sec.Data != nil) {
			t.Fatalf("version %d survived: %+v, %v", ver, sec, err)
		}
	}
	if err := s.Delete(ctx, id); err != nil {
		t.Fatalf("deleting a missing record: %v", err)
	}
}

func enableAppRole(t *testing.T, v *vaultEnv, ttl, maxTTL string) (roleID, secretID string) {
	t.Helper()
	if err := v.root.Sys().EnableAuthWithOptions("approle", &vault.EnableAuthOptions{Type: "approle"}); err != nil {
		t.Fatal(err)
	}
	if _, err := v.root.Logical().Write("auth/approle/role/mcpbus-credential", map[string]any{
		"token_policies": "mcpbus", "token_ttl": ttl, "token_max_ttl": maxTTL,
	}); err != nil {
		t.Fatal(err)
	}
	r, err := v.root.Logical().Read("auth/approle/role/mcpbus-credential/role-id")
	if err != nil {
		t.Fatal(err)
	}
	s, err := v.root.Logical().Write("auth/approle/role/mcpbus-credential/secret-id", nil)
	if err != nil {
		t.Fatal(err)
	}
	return r.Data["role_id"].(string), s.Data["secret_id"].(string)
}

func TestAppRole(t *testing.T) {
	t.Parallel() // each test has its own Vault
	v := startVault(t)
	ctx := ctxT(t)
	roleID, secretID := enableAppRole(t, v, "1h", "2h")
	// A wrong secret id is UNAUTHORIZED, and says nothing of the secret id.
	bad := v.store(t, vaultstore.Config{RoleID: roleID, SecretID: "wrong-secret-id"})
	err := bad.Put(ctx, uuid.NewString(), sample())
	if e := apierr.From(err); e.Code != apierr.Unauthorized || strings.Contains(e.Message, "wrong-secret-id") {
		t.Fatalf("bad secret id: %v", err)
	}

	s := v.store(t, vaultstore.Config{RoleID: roleID, SecretID: secretID})
	id := uuid.NewString()
	if err := s.Put(ctx, id, sample()); err != nil {
		t.Fatal(err)
	}
	if got, _, err := s.Get(ctx, id); err != nil || !reflect.DeepEqual(got, sample()) {
		t.Fatalf("AppRole round trip: %+v, %v", got, err)
	}
	// The token in use came from the AppRole login and has the policy.
	info, err := v.root.Auth().Token().Lookup(s.Token())
	if err != nil {
		t.Fatal(err)
	}
	pols, _ := info.TokenPolicies()
	if !strings.Contains(strings.Join(pols, ","), "mcpbus") || s.Token() == v.srv.Token {
		t.Fatalf("AppRole token policies %v", pols)
	}
}

func TestTokenRenewal(t *testing.T) {
	t.Parallel() // each test has its own Vault
	v := startVault(t)
	ctx := ctxT(t)
	const ttl = 3 * time.Second
	kept := v.token(t, "3s", "5m")
	s := v.store(t, vaultstore.Config{Token: kept})
	// The same kind of token, left alone, expires: the store's one lives only through renewal.
	control := v.token(t, "3s", "5m")
	id := uuid.NewString()
	if err := s.Put(ctx, id, sample()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3*ttl + time.Second)
	if _, err := v.client(t, control).Auth().Token().LookupSelf(); err == nil {
		t.Fatal("the control token did not expire: the test proves nothing")
	}
	if got, _, err := s.Get(ctx, id); err != nil || !reflect.DeepEqual(got, sample()) {
		t.Fatalf("after 3 TTLs the store's token no longer works: %v", err)
	}
	info, err := v.root.Auth().Token().Lookup(kept)
	if err != nil {
		t.Fatalf("the renewed token is gone: %v", err)
	}
	// Its life was extended past its first TTL (the remaining TTL itself,
	// whole seconds, may read 0 just before the next renewal).
	issued, err1 := time.Parse(time.RFC3339Nano, fmt.Sprint(info.Data["issue_time"]))
	expires, err2 := time.Parse(time.RFC3339Nano, fmt.Sprint(info.Data["expire_time"]))
	if err1 != nil || err2 != nil || info.Data["last_renewal_time"] == nil || !expires.After(issued.Add(3*ttl)) {
		t.Fatalf("the token was not renewed: issued %v, expires %v, last renewal %v (%v, %v)", issued, expires, info.Data["last_renewal_time"], err1, err2)
	}
}

// TestAppRoleLoginAgainAfterMaxTTL: tokens of the role live 3 s and renew up
// to 6 s; after that only a new login helps, and the store does it on its own.
func TestAppRoleLoginAgainAfterMaxTTL(t *testing.T) {
	t.Parallel() // each test has its own Vault
	v := startVault(t)
	ctx := ctxT(t)
	roleID, secretID := enableAppRole(t, v, "3s", "6s")

	// Left idle, the store logs in again before the token's end: no request
	// is needed to notice (so none has to fail first).
	idle := v.store(t, vaultstore.Config{RoleID: roleID, SecretID: secretID})
	first := idle.Token()
	time.Sleep(8 * time.Second)
	if idle.Token() == first {
		t.Fatal("no new login although the first token's max TTL has passed")
	}
	if _, err := v.client(t, first).Auth().Token().LookupSelf(); err == nil {
		t.Fatal("the first token is still valid: the test proves nothing")
	}
	id := uuid.NewString()
	if err := idle.Put(ctx, id, sample()); err != nil {
		t.Fatalf("after the new login: %v", err)
	}

	// Under steady use no request ever meets an expired token.
	busy := v.store(t, vaultstore.Config{RoleID: roleID, SecretID: secretID})
	tokens := map[string]bool{}
	deadline := time.Now().Add(14 * time.Second)
	for time.Now().Before(deadline) {
		tokens[busy.Token()] = true
		if _, _, err := busy.Get(ctx, id); err != nil {
			t.Fatalf("a request met an expired token: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(tokens) < 2 {
		t.Fatalf("%d tokens used over two max TTLs", len(tokens))
	}
}

// TestRevokedAppRoleToken: a token revoked by an operator is replaced by a new
// login on the request that meets it.
func TestRevokedAppRoleToken(t *testing.T) {
	t.Parallel() // each test has its own Vault
	v := startVault(t)
	ctx := ctxT(t)
	roleID, secretID := enableAppRole(t, v, "1h", "2h")
	s := v.store(t, vaultstore.Config{RoleID: roleID, SecretID: secretID})
	id := uuid.NewString()
	if err := s.Put(ctx, id, sample()); err != nil {
		t.Fatal(err)
	}
	first := s.Token()
	if err := v.root.Auth().Token().RevokeOrphan(first); err != nil {
		t.Fatal(err)
	}
	if _, err := v.client(t, first).Auth().Token().LookupSelf(); err == nil {
		t.Fatal("the revoked token still works")
	}
	if got, _, err := s.Get(ctx, id); err != nil || !reflect.DeepEqual(got, sample()) {
		t.Fatalf("after revocation: %v", err)
	}
	if s.Token() == first {
		t.Fatal("still the revoked token")
	}
}

// TestVaultGone: Vault dies under a working store.
func TestVaultGone(t *testing.T) {
	t.Parallel() // each test has its own Vault
	v := startVault(t)
	ctx := ctxT(t)
	s := v.store(t, vaultstore.Config{Token: v.token(t, "1h", ""), MaxRetries: -1})
	id := uuid.NewString()
	if err := s.Put(ctx, id, sample()); err != nil {
		t.Fatal(err)
	}
	v.srv.Kill()
	if err := s.Put(ctx, id, sample()); apierr.Of(err) != apierr.ServiceUnavailable {
		t.Fatalf("Put with Vault gone: %v", err)
	}
	if _, _, err := s.Get(ctx, id); apierr.Of(err) != apierr.ServiceUnavailable {
		t.Fatalf("Get with Vault gone: %v", err)
	}
}

// TestSealedVault runs the service on the Vault backend: requests work, then
// Vault is sealed and every verb answers SERVICE_UNAVAILABLE.
func TestSealedVault(t *testing.T) {
	t.Parallel() // each test has its own Vault
	v := startVault(t)
	ctx := ctxT(t)
	s := v.store(t, vaultstore.Config{Token: v.token(t, "1h", ""), MaxRetries: -1})
	nc := credOnVault(t, s)
	c := credclient.New(nc, "")
	res, err := credclient.NewResolver(nc, "")
	if err != nil {
		t.Fatal(err)
	}

	id := uuid.NewString()
	desc, err := c.Set(ctx, model.CredSetRequest{ServerID: id, Credentials: model.Credentials{Env: map[string]string{"V": "old"}}})
	if err != nil || desc.Backend != "vault" || !desc.Has("V") {
		t.Fatalf("set on Vault: %+v, %v", desc, err)
	}
	if got, err := res.Resolve(ctx, id); err != nil || got.Env["V"] != "old" {
		t.Fatalf("resolve on Vault: %+v, %v", got, err)
	}
	if err := v.root.Sys().Seal(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Set(ctx, model.CredSetRequest{ServerID: id, Credentials: model.Credentials{Env: map[string]string{"V": "new"}}}); apierr.Of(err) != apierr.ServiceUnavailable {
		t.Fatalf("set on a sealed Vault: %v", err)
	}
	if _, err := c.Describe(ctx, model.CredDescribeRequest{ServerID: id}); apierr.Of(err) != apierr.ServiceUnavailable {
		t.Fatalf("describe on a sealed Vault: %v", err)
	}
	if _, err := res.Resolve(ctx, id); apierr.Of(err) != apierr.ServiceUnavailable {
		t.Fatalf("resolve on a sealed Vault: %v", err)
	}
	err = s.Put(ctx, id, model.Credentials{Env: map[string]string{"V": "new"}})
	if e := apierr.From(err); err == nil || e.Code != apierr.ServiceUnavailable {
		t.Fatalf("Put on a sealed Vault: %v", err)
	}
	if _, _, err := s.Get(ctx, id); apierr.Of(err) != apierr.ServiceUnavailable {
		t.Fatalf("Get on a sealed Vault: %v", err)
	}
	if err := s.Delete(ctx, id); apierr.Of(err) != apierr.ServiceUnavailable {
		t.Fatalf("Delete on a sealed Vault: %v", err)
	}
	st, err := v.root.Sys().SealStatus()
	if err != nil || !st.Sealed {
		t.Fatalf("Vault is not sealed: %+v, %v", st, err)
	}
}

// TestDeniedPathNoTokenFlood: the AppRole's policy denies one record. Each
// request for it is answered UNAUTHORIZED ("denied access", the policy's
// word) without a new login: a login on each denial would make a new Vault
// token per request. A plain "permission denied" may also be an expired
// token on some Vault versions, so once the last login is old enough
// (reloginEvery) one denial logs in again, and only one.
func TestDeniedPathNoTokenFlood(t *testing.T) {
	t.Parallel() // each test has its own Vault
	v := startVault(t)
	ctx := ctxT(t)
	roleID, secretID := enableAppRole(t, v, "1h", "2h")
	denied := store.Key(model.CredServer, uuid.NewString())
	if err := v.root.Sys().PutPolicy("mcpbus-deny", fmt.Sprintf(`
path "secret/data/mcpbus/%[1]s" { capabilities = ["deny"] }
path "secret/metadata/mcpbus/%[1]s" { capabilities = ["deny"] }
`, denied)); err != nil {
		t.Fatal(err)
	}
	if _, err := v.root.Logical().Write("auth/approle/role/mcpbus-credential", map[string]any{"token_policies": "mcpbus,mcpbus-deny"}); err != nil {
		t.Fatal(err)
	}
	s := v.store(t, vaultstore.Config{RoleID: roleID, SecretID: secretID})
	allowed := store.Key(model.CredServer, uuid.NewString())
	if err := s.Put(ctx, allowed, sample()); err != nil {
		t.Fatal(err)
	}
	first := s.Token()
	deniedOnce := func() {
		t.Helper()
		_, _, err := s.Get(ctx, denied)
		if e := apierr.From(err); e == nil || e.Code != apierr.Unauthorized || !strings.Contains(e.Message, "denied access") {
			t.Fatalf("a denied record: %v", err)
		}
	}
	for range 20 {
		deniedOnce()
		if err := s.Put(ctx, denied, sample()); apierr.Of(err) != apierr.Unauthorized {
			t.Fatalf("a denied write: %v", err)
		}
	}
	if s.Token() != first {
		t.Fatal("a policy denial made the store log in again right after its login")
	}
	vaultstore.SetReloginEvery(s, 300*time.Millisecond)
	time.Sleep(400 * time.Millisecond)
	tokens := map[string]bool{first: true}
	for range 10 {
		deniedOnce()
		tokens[s.Token()] = true
	}
	if len(tokens) != 2 {
		t.Fatalf("%d tokens after ten denials past the interval, want 2 (one new login)", len(tokens))
	}
	if got, _, err := s.Get(ctx, allowed); err != nil || !reflect.DeepEqual(got, sample()) {
		t.Fatalf("an allowed record after the denials: %v", err)
	}
}
