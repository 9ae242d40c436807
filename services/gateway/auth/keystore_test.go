package auth_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
)

type env struct {
	ns *embednats.Server
	nc *nats.Conn
	js jetstream.JetStream
}

func startNATS(t *testing.T) *env {
	t.Helper()
	ns, err := embednats.Start(embednats.Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	nc, err := ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &env{ns: ns, nc: nc, js: js}
}

// openStore opens a key store on its own connection, as one gateway instance.
func (e *env) openStore(t *testing.T) *auth.KeyStore {
	t.Helper()
	nc, err := e.ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := auth.OpenKeyStore(ctx, js, auth.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func wantCode(t *testing.T, err error, code apierr.Code, field string) {
	t.Helper()
	var e *apierr.Error
	if !errors.As(err, &e) {
		t.Fatalf("want %s error, got %T %v", code, err, err)
	}
	if e.Code != code || (field != "" && e.Field != field) {
		t.Fatalf("want %s (field %q), got %s (field %q): %s", code, field, e.Code, e.Field, e.Message)
	}
}

func TestCreateAuthenticateListRevoke(t *testing.T) {
	e := startNATS(t)
	s := e.openStore(t)
	key, err := s.Create(ctx(t), model.KeyCreateRequest{Name: "ci bot", Scopes: []string{"call"},
		Tools: model.ToolFilter{Allow: []string{"alpha__*"}}, Rate: &model.KeyRate{RPS: 5, Burst: 10},
		ToolsMode: model.KeyToolsModeSearch, PinnedTools: []string{"alpha__echo"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(key.Key, "mcpbus_"+key.ID+"_") || len(key.Key) != len("mcpbus_")+16+1+43 {
		t.Fatalf("key %q does not look like mcpbus_<16 hex id>_<43 base64url>", key.Key)
	}
	p, err := s.Authenticate(ctx(t), key.Key)
	if err != nil {
		t.Fatal(err)
	}
	if p.KeyID != key.ID || p.Name != "ci bot" || !p.Can(auth.ScopeCall) || p.Can(auth.ScopeAdmin) ||
		!p.AllowsTool("alpha__echo") || p.AllowsTool("beta__echo") || p.Rate == nil || p.Rate.RPS != 5 ||
		!p.SearchMode() || !slices.Equal(p.PinnedTools, []string{"alpha__echo"}) {
		t.Fatalf("principal %+v does not carry the key's settings", p)
	}

	// The bucket holds the hash, never the secret.
	_, secret, _ := auth.ParseKey(key.Key)
	kv, err := e.js.KeyValue(ctx(t), auth.BucketAPIKeys)
	if err != nil {
		t.Fatal(err)
	}
	entry, err := kv.Get(ctx(t), key.ID)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(entry.Value()), secret) || !strings.Contains(string(entry.Value()), `"hash"`) {
		t.Fatalf("stored record must hold a hash and not the secret: %s", entry.Value())
	}

	list, err := s.List(ctx(t), false)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(list)
	if len(list) != 1 || list[0].ID != key.ID || strings.Contains(string(raw), "hash") || strings.Contains(string(raw), secret) {
		t.Fatalf("list must show the key without hash or secret: %s", raw)
	}

	revoked, err := s.Revoke(ctx(t), key.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !revoked.Revoked() {
		t.Fatalf("revoke returned %+v", revoked)
	}
	_, err = s.Authenticate(ctx(t), key.Key)
	wantCode(t, err, apierr.Unauthorized, "")
	if list, _ := s.List(ctx(t), false); len(list) != 0 {
		t.Fatalf("revoked key still listed: %+v", list)
	}
	if list, _ := s.List(ctx(t), true); len(list) != 1 || !list[0].Revoked() {
		t.Fatalf("include_revoked must list it as revoked: %+v", list)
	}
	// Revoking again changes nothing.
	again, err := s.Revoke(ctx(t), key.ID)
	if err != nil || !again.RevokedAt.Equal(revoked.RevokedAt) {
		t.Fatalf("second revoke: %+v, %v", again, err)
	}
	_, err = s.Revoke(ctx(t), "0123456789abcdef")
	wantCode(t, err, apierr.NotFound, "id")
}

func TestAuthenticateRefusesBadKeys(t *testing.T) {
	e := startNATS(t)
	s := e.openStore(t)
	key, err := s.Create(ctx(t), model.KeyCreateRequest{Name: "k"})
	if err != nil {
		t.Fatal(err)
	}
	id, secret, _ := auth.ParseKey(key.Key)
	flipped := []byte(secret) // well-formed, wrong by one character
	if flipped[0] == 'A' {
		flipped[0] = 'B'
	} else {
		flipped[0] = 'A'
	}
	for name, tok := range map[string]string{
		"empty":        "",
		"garbage":      "hello",
		"no prefix":    id + "_" + secret,
		"wrong secret": "mcpbus_" + id + "_" + string(flipped),
		"unknown id":   "mcpbus_0123456789abcdef_" + secret,
		"short secret": "mcpbus_" + id + "_" + secret[:20],
		"upper id":     "mcpbus_" + strings.ToUpper(id) + "_" + secret,
	} {
		if _, err := s.Authenticate(ctx(t), tok); apierr.Of(err) != apierr.Unauthorized {
			t.Errorf("%s: want UNAUTHORIZED, got %v", name, err)
		}
	}
	if _, err := s.Authenticate(ctx(t), key.Key); err != nil {
		t.Fatalf("the real key must still work: %v", err)
	}
}

func TestCreateRejectsBadInputAndStoresNothing(t *testing.T) {
	e := startNATS(t)
	s := e.openStore(t)
	cases := []struct {
		req   model.KeyCreateRequest
		field string
	}{
		{model.KeyCreateRequest{}, "name"},
		{model.KeyCreateRequest{Name: strings.Repeat("n", 65)}, "name"},
		{model.KeyCreateRequest{Name: "a\nb"}, "name"},
		{model.KeyCreateRequest{Name: "k", Scopes: []string{"call", "root"}}, "scopes[1]"},
		{model.KeyCreateRequest{Name: "k", Tools: model.ToolFilter{Allow: []string{"[a-"}}}, "tools.allow[0]"},
		{model.KeyCreateRequest{Name: "k", Tools: model.ToolFilter{Deny: []string{"ok", " "}}}, "tools.deny[1]"},
		{model.KeyCreateRequest{Name: "k", Rate: &model.KeyRate{RPS: 0, Burst: 1}}, "rate.rps"},
		{model.KeyCreateRequest{Name: "k", Rate: &model.KeyRate{RPS: 1, Burst: 0}}, "rate.burst"},
		{model.KeyCreateRequest{Name: "k", ToolsMode: "lazy"}, "tools_mode"},
		{model.KeyCreateRequest{Name: "k", PinnedTools: []string{"alpha__echo"}}, "pinned_tools"},
		{model.KeyCreateRequest{Name: "k", ToolsMode: "search", PinnedTools: []string{"alpha__echo", "a b"}}, "pinned_tools[1]"},
		{model.KeyCreateRequest{Name: "k", ToolsMode: "search", PinnedTools: make([]string, model.MaxKeyPinnedTools+1)}, "pinned_tools"},
	}
	for _, c := range cases {
		_, err := s.Create(ctx(t), c.req)
		wantCode(t, err, apierr.Validation, c.field)
	}
	if list, err := s.List(ctx(t), true); err != nil || len(list) != 0 {
		t.Fatalf("bad requests stored keys: %+v, %v", list, err)
	}
	k, err := s.Create(ctx(t), model.KeyCreateRequest{Name: "dup scopes", Scopes: []string{"admin", "admin", "call"}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(k.Scopes, ",") != "admin,call" {
		t.Fatalf("scopes %v, want admin,call", k.Scopes)
	}
	d, err := s.Create(ctx(t), model.KeyCreateRequest{Name: "default scope"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(d.Scopes, ",") != "call" {
		t.Fatalf("default scopes %v, want call", d.Scopes)
	}
}

// Two gateway instances share the bucket: a key made on one works on the
// other at once, and a revocation on one is refused by the other promptly.
func TestRevocationReachesOtherInstances(t *testing.T) {
	e := startNATS(t)
	a, b := e.openStore(t), e.openStore(t)
	key, err := a.Create(ctx(t), model.KeyCreateRequest{Name: "shared", Scopes: []string{"admin"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Authenticate(ctx(t), key.Key); err != nil {
		t.Fatalf("instance b must accept a key just made on a: %v", err)
	}
	if _, err := a.Revoke(ctx(t), key.ID); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		_, err := b.Authenticate(ctx(t), key.Key)
		if apierr.Of(err) == apierr.Unauthorized {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("instance b still accepts the revoked key after 2s: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// A third instance started now sees the key revoked from the start.
	c := e.openStore(t)
	_, err = c.Authenticate(ctx(t), key.Key)
	wantCode(t, err, apierr.Unauthorized, "")
}

func TestKeysOverTheBus(t *testing.T) {
	e := startNATS(t)
	s := e.openStore(t)
	svc, err := auth.AddKeysService(e.nc, s, "", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	subj := bus.NewSubjects("")
	client, err := e.ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)

	var created model.KeyCreateReply
	if err := bus.RequestJSON(ctx(t), client, subj.Service("keys", "create"),
		model.KeyCreateRequest{Name: "cli", Scopes: []string{"call"}}, &created, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(ctx(t), created.Key); err != nil {
		t.Fatalf("key from the bus does not authenticate: %v", err)
	}
	var list model.KeyListReply
	if err := bus.RequestJSON(ctx(t), client, subj.Service("keys", "list"), model.KeyListRequest{}, &list, 0); err != nil {
		t.Fatal(err)
	}
	if len(list.Keys) != 1 || list.Keys[0].ID != created.ID {
		t.Fatalf("list: %+v", list)
	}
	// Unknown fields and bad values are refused with the contract.
	err = bus.RequestJSON(ctx(t), client, subj.Service("keys", "create"), map[string]any{"name": "x", "scope": "admin"}, nil, 0)
	wantCode(t, err, apierr.Validation, "")
	err = bus.RequestJSON(ctx(t), client, subj.Service("keys", "create"), model.KeyCreateRequest{Name: "x", Scopes: []string{"god"}}, nil, 0)
	wantCode(t, err, apierr.Validation, "scopes[0]")
	err = bus.RequestJSON(ctx(t), client, subj.Service("keys", "revoke"), model.KeyRevokeRequest{}, nil, 0)
	wantCode(t, err, apierr.Validation, "id")
	err = bus.RequestJSON(ctx(t), client, subj.Service("keys", "revoke"), model.KeyRevokeRequest{ID: "../etc"}, nil, 0)
	wantCode(t, err, apierr.Validation, "id")

	var revoked model.APIKey
	if err := bus.RequestJSON(ctx(t), client, subj.Service("keys", "revoke"), model.KeyRevokeRequest{ID: created.ID}, &revoked, 0); err != nil {
		t.Fatal(err)
	}
	if !revoked.Revoked() {
		t.Fatalf("revoke reply: %+v", revoked)
	}
	_, err = s.Authenticate(ctx(t), created.Key)
	wantCode(t, err, apierr.Unauthorized, "")
}

func TestEnsureAdminKey(t *testing.T) {
	e := startNATS(t)
	s := e.openStore(t)
	dir := filepath.Join(t.TempDir(), "data")
	path, created, err := auth.EnsureAdminKey(ctx(t), s, dir)
	if err != nil {
		t.Fatal(err)
	}
	if !created || path != filepath.Join(dir, "admin.key") {
		t.Fatalf("first start: created=%v path=%s", created, path)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("admin.key mode %v, want 0600", st.Mode().Perm())
	}
	first, _ := os.ReadFile(path)
	p, err := s.Authenticate(ctx(t), strings.TrimSpace(string(first)))
	if err != nil || !p.Can(auth.ScopeAdmin) {
		t.Fatalf("admin.key does not hold an admin key: %v %+v", err, p)
	}

	// Second start: the same key is kept (and the file made private again).
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	_, created, err = auth.EnsureAdminKey(ctx(t), s, dir)
	if err != nil {
		t.Fatal(err)
	}
	second, _ := os.ReadFile(path)
	st, _ = os.Stat(path)
	if created || string(second) != string(first) || st.Mode().Perm() != 0o600 {
		t.Fatalf("restart must reuse the key in a 0600 file: created=%v same=%v mode=%v", created, string(second) == string(first), st.Mode().Perm())
	}

	// Revoked: a new key replaces it.
	if _, err := s.Revoke(ctx(t), p.KeyID); err != nil {
		t.Fatal(err)
	}
	_, created, err = auth.EnsureAdminKey(ctx(t), s, dir)
	if err != nil {
		t.Fatal(err)
	}
	third, _ := os.ReadFile(path)
	if !created || string(third) == string(first) {
		t.Fatal("a revoked admin key must be replaced")
	}
	if _, err := s.Authenticate(ctx(t), strings.TrimSpace(string(third))); err != nil {
		t.Fatalf("the new admin key does not work: %v", err)
	}
	if keys, _ := s.List(ctx(t), false); len(keys) != 1 {
		t.Fatalf("want exactly one live key, got %+v", keys)
	}
}

// A gateway whose NATS server restarts still learns of revocations made
// after the restart (its watch resumes, or the bucket is read meanwhile).
func TestRevocationAfterServerRestart(t *testing.T) {
	dir := t.TempDir()
	ns, err := embednats.Start(embednats.Options{Port: -1, StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := ns.ConnectTCP(nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	a, err := auth.OpenKeyStore(ctx(t), js, auth.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	key, err := a.Create(ctx(t), model.KeyCreateRequest{Name: "survivor"})
	if err != nil {
		t.Fatal(err)
	}

	ns.Stop()
	ns2, err := embednats.Start(ns.Options())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns2.Stop)
	e2 := &env{ns: ns2}
	b := e2.openStore(t)
	if _, err := b.Revoke(ctx(t), key.ID); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := a.Authenticate(ctx(t), key.Key)
		if apierr.Of(err) == apierr.Unauthorized {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restarted-server gateway still accepts the revoked key: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
