package profiles_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/mcpbus/mcpbus/libs/access"
	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/chat/profiles"
	"github.com/mcpbus/mcpbus/services/credential/credential"
	"github.com/mcpbus/mcpbus/services/credential/store"
	"github.com/mcpbus/mcpbus/services/credential/store/filestore"
)

const (
	secretKey  = "sk-test-0123456789abcdefSECRET"
	secretKey2 = "sk-other-9876543210SECRET"
)

// env is an embedded server whose users are the chat and credential
// identities with the permission table's rights, and an unrestricted test
// user; a real credential service (file store) runs in process.
type env struct {
	t      *testing.T
	ns     *embednats.Server
	chat   *nats.Conn
	admin  *nats.Conn
	store  *profiles.Store
	cred   *credential.Service
	stopCr func()
	files  *filestore.Store
	logs   *testkit.LogBuffer
}

func connectAs(t *testing.T, ns *embednats.Server, id access.Identity) *nats.Conn {
	t.Helper()
	kp, err := nkeys.FromSeed(id.Seed)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := ns.ConnectTCP(nats.Nkey(id.Public, kp.Sign), nats.CustomInboxPrefix(id.Inbox()),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { t.Logf("%s connection: %v", id.Name, err) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ids, err := access.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var users []*server.NkeyUser
	idOf := map[access.Role]access.Identity{}
	for _, r := range []access.Role{access.Chat, access.Credential} {
		id, err := ids.Ensure(string(r), r)
		if err != nil {
			t.Fatal(err)
		}
		u, err := access.User(id, "mcp.v1")
		if err != nil {
			t.Fatal(err)
		}
		users = append(users, u)
		idOf[r] = id
	}
	admin, _ := nkeys.CreateUser()
	adminPub, _ := admin.PublicKey()
	ns, err := embednats.Start(embednats.Options{Port: -1, StoreDir: filepath.Join(t.TempDir(), "js"),
		Users: append(users, &server.NkeyUser{Nkey: adminPub})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	e := &env{t: t, ns: ns, logs: &testkit.LogBuffer{}}
	// An inbox under _I, as every identity's: services answer only into those.
	e.admin, err = ns.ConnectTCP(nats.Nkey(adminPub, admin.Sign), nats.CustomInboxPrefix(access.Inbox("test-admin")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.admin.Close)

	e.files, err = filestore.New(filepath.Join(t.TempDir(), "credentials"))
	if err != nil {
		t.Fatal(err)
	}
	e.cred, err = credential.New(connectAs(t, ns, idOf[access.Credential]), credential.Options{Store: e.files,
		Logger: slog.New(slog.NewJSONHandler(e.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	e.stopCr = testkit.RunService(t, e.cred)

	e.chat = connectAs(t, ns, idOf[access.Chat])
	e.store, err = profiles.Open(ctxT(t), e.chat, profiles.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, s := range []string{secretKey, secretKey2} {
			if strings.Contains(e.logs.String(), s) {
				t.Errorf("the credential service log contains the key %q", s)
			}
		}
	})
	return e
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func wantErr(t *testing.T, err error, code apierr.Code, field string) {
	t.Helper()
	if apierr.Of(err) != code {
		t.Fatalf("error %v: code %q, want %s", err, apierr.Of(err), code)
	}
	if field != "" && apierr.From(err).Field != field {
		t.Fatalf("error %v: field %q, want %q", err, apierr.From(err).Field, field)
	}
}

// stored is what the credential service holds for the profile (nil: nothing).
func (e *env) stored(name string) map[string]string {
	e.t.Helper()
	c, _, err := e.files.Get(ctxT(e.t), store.Key(model.CredChatProfile, model.ChatProfileCredentialID(name)))
	if err != nil {
		return nil
	}
	return c.Env
}

// raw is the bucket's entry of a profile, as anyone who may read it sees it.
func (e *env) raw(name string) []byte {
	e.t.Helper()
	js, _ := jetstream.New(e.admin)
	kv, err := js.KeyValue(ctxT(e.t), "mcp_chat_profiles")
	if err != nil {
		e.t.Fatal(err)
	}
	en, err := kv.Get(ctxT(e.t), name)
	if err != nil {
		return nil
	}
	return en.Value()
}

func profile(name string) model.Profile {
	return model.Profile{Name: name, Provider: "openai", Model: "gpt-4o-mini", BaseURL: "http://127.0.0.1:11434/v1",
		SystemPrompt: "Use the tools.", ToolFilter: model.ChatToolFilter{Include: []string{"github__*"}, Exclude: []string{"*__delete_*"}},
		Approval: model.ApprovalPolicy{Default: "ask", Rules: []model.ApprovalRule{{Tool: "github__list_*", Decision: "allow"}}},
		Prices:   &model.ChatPrices{InputPerMTok: 0.15, OutputPerMTok: 0.6, Currency: "USD"}}
}

func TestPutGetListDelete(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)

	got, err := e.store.Put(ctx, profile("work"), profiles.APIKey{Value: secretKey})
	if err != nil {
		t.Fatal(err)
	}
	if !got.HasAPIKey || got.APIKeyRef != model.ChatProfileCredentialID("work") || got.MaxSteps != 20 || got.Revision == 0 || got.CreatedAt.IsZero() {
		t.Fatalf("put returned %+v", got)
	}
	if env := e.stored("work"); !reflect.DeepEqual(env, map[string]string{"API_KEY": secretKey}) {
		t.Fatalf("credential service holds %v", env)
	}
	if raw := e.raw("work"); raw == nil || strings.Contains(string(raw), secretKey) {
		t.Fatalf("stored profile %s", raw)
	}
	back, err := e.store.Get(ctx, "work")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, got) {
		t.Fatalf("get:\n got %+v\nwant %+v", back, got)
	}
	if data, _ := json.Marshal(back); strings.Contains(string(data), secretKey) || !strings.Contains(string(data), `"has_api_key":true`) {
		t.Fatalf("profile JSON %s", data)
	}
	if ok, err := e.store.KeyStored(ctx, "work"); err != nil || !ok {
		t.Fatalf("key stored: %v %v", ok, err)
	}

	// An update without a key keeps the key; a new key replaces it.
	p := back
	p.Model = "gpt-4.1"
	up, err := e.store.Put(ctx, p, profiles.APIKey{})
	if err != nil || !up.HasAPIKey || up.Model != "gpt-4.1" || !up.CreatedAt.Equal(got.CreatedAt) || up.Revision <= got.Revision {
		t.Fatalf("update: %+v %v", up, err)
	}
	if env := e.stored("work"); env["API_KEY"] != secretKey {
		t.Fatalf("key after update %v", env)
	}
	// A stale revision is a conflict and changes nothing.
	p.Model = "stale"
	_, err = e.store.Put(ctx, p, profiles.APIKey{Value: secretKey2})
	wantErr(t, err, apierr.Conflict, "")
	if now, _ := e.store.Get(ctx, "work"); now.Model != "gpt-4.1" || e.stored("work")["API_KEY"] != secretKey {
		t.Fatalf("after conflict: %+v %v", now, e.stored("work"))
	}
	up.SystemPrompt = "new"
	if _, err := e.store.Put(ctx, up, profiles.APIKey{Value: secretKey2}); err != nil {
		t.Fatal(err)
	}
	if env := e.stored("work"); !reflect.DeepEqual(env, map[string]string{"API_KEY": secretKey2}) {
		t.Fatalf("key after replace %v", env)
	}

	// A local model without a key; then the key of "work" removed.
	if _, err := e.store.Put(ctx, model.Profile{Name: "local", Provider: "openai", Model: "llama3.2", BaseURL: "http://localhost:11434/v1"}, profiles.APIKey{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Put(ctx, model.Profile{Name: "claude", Provider: "anthropic", Model: "claude-sonnet-4-5", MaxSteps: 5}, profiles.APIKey{Value: secretKey}); err != nil {
		t.Fatal(err)
	}
	w, _ := e.store.Get(ctx, "work")
	if w, err = e.store.Put(ctx, w, profiles.APIKey{Remove: true}); err != nil || w.HasAPIKey {
		t.Fatalf("remove key: %+v %v", w, err)
	}
	if e.stored("work") != nil {
		t.Fatal("the key of work is still stored")
	}
	if ok, err := e.store.KeyStored(ctx, "work"); err != nil || ok {
		t.Fatalf("key stored after removal: %v %v", ok, err)
	}

	list, err := e.store.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range list {
		names = append(names, p.Name)
		if p.Name == "claude" && (!p.HasAPIKey || p.MaxSteps != 5) || p.Name == "local" && p.HasAPIKey {
			t.Errorf("listed %+v", p)
		}
	}
	if strings.Join(names, ",") != "claude,local,work" {
		t.Fatalf("list %v", names)
	}

	// Delete removes the profile and its key.
	if err := e.store.Delete(ctx, "claude"); err != nil {
		t.Fatal(err)
	}
	if e.stored("claude") != nil {
		t.Fatal("the key of a deleted profile is still stored")
	}
	_, err = e.store.Get(ctx, "claude")
	wantErr(t, err, apierr.NotFound, "")
	wantErr(t, e.store.Delete(ctx, "claude"), apierr.NotFound, "")
	_, err = e.store.Get(ctx, "nope")
	wantErr(t, err, apierr.NotFound, "")
	// A profile deleted can be made again.
	if _, err := e.store.Put(ctx, model.Profile{Name: "claude", Provider: "anthropic", Model: "m"}, profiles.APIKey{}); err != nil {
		t.Fatal(err)
	}
}

func TestSealedKey(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	// A client seals the key to the credential service; the chat service
	// forwards it unopened.
	sealer := credclient.NewSealer(e.admin, "")
	sealed, err := sealer.SealSecrets(ctx, model.Credentials{Env: map[string]string{"API_KEY": secretKey}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.store.Put(ctx, profile("sealed"), profiles.APIKey{Sealed: sealed})
	if err != nil || !got.HasAPIKey {
		t.Fatalf("put sealed: %+v %v", got, err)
	}
	if e.stored("sealed")["API_KEY"] != secretKey {
		t.Fatalf("stored %v", e.stored("sealed"))
	}

	// Sealed secrets that hold something else are refused, nothing stored.
	other, err := sealer.SealSecrets(ctx, model.Credentials{Env: map[string]string{"GITHUB_TOKEN": secretKey2}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.store.Put(ctx, profile("other"), profiles.APIKey{Sealed: other})
	wantErr(t, err, apierr.Validation, "secret_names")
	// Names that lie about the content are refused by the credential service.
	other.Names = &model.SecretNames{Env: []string{"API_KEY"}}
	_, err = e.store.Put(ctx, profile("other"), profiles.APIKey{Sealed: other})
	wantErr(t, err, apierr.Validation, "secret_names")
	// A blob sealed to another key does not open.
	kp, _ := nkeys.CreateCurveKeys()
	pub, _ := kp.PublicKey()
	blob, sender, err := credclient.Seal(model.Credentials{Env: map[string]string{"API_KEY": secretKey2}}, pub)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.store.Put(ctx, profile("other"), profiles.APIKey{Sealed: model.SealedSecrets{Sealed: blob, SenderKey: sender, Names: &model.SecretNames{Env: []string{"API_KEY"}}}})
	wantErr(t, err, apierr.Validation, "sealed_secrets")
	if e.raw("other") != nil || e.stored("other") != nil {
		t.Fatal("a refused put stored something")
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	base, err := e.store.Put(ctx, profile("base"), profiles.APIKey{Value: secretKey})
	if err != nil {
		t.Fatal(err)
	}
	rawBefore := string(e.raw("base"))
	mod := func(f func(p *model.Profile)) model.Profile {
		p := base
		f(&p)
		return p
	}
	cases := []struct {
		p     model.Profile
		key   profiles.APIKey
		field string
	}{
		{mod(func(p *model.Profile) { p.Name = "" }), profiles.APIKey{}, "name"},
		{mod(func(p *model.Profile) { p.Name = "a.b" }), profiles.APIKey{}, "name"},
		{mod(func(p *model.Profile) { p.Name = "Big Name" }), profiles.APIKey{}, "name"},
		{mod(func(p *model.Profile) { p.Provider = "gemini" }), profiles.APIKey{}, "provider"},
		{mod(func(p *model.Profile) { p.Provider = "" }), profiles.APIKey{}, "provider"},
		{mod(func(p *model.Profile) { p.Model = " " }), profiles.APIKey{}, "model"},
		{mod(func(p *model.Profile) { p.BaseURL = "ftp://x" }), profiles.APIKey{}, "base_url"},
		{mod(func(p *model.Profile) { p.BaseURL = "https://u:p@api.example.com" }), profiles.APIKey{}, "base_url"},
		{mod(func(p *model.Profile) { p.MaxSteps = -1 }), profiles.APIKey{}, "max_steps"},
		{mod(func(p *model.Profile) { p.MaxSteps = 100000 }), profiles.APIKey{}, "max_steps"},
		{mod(func(p *model.Profile) { p.MaxTokensPerTurn = -5 }), profiles.APIKey{}, "max_tokens_per_turn"},
		{mod(func(p *model.Profile) { p.MaxTurnDuration = model.Duration(-time.Second) }), profiles.APIKey{}, "max_turn_duration"},
		{mod(func(p *model.Profile) { p.ToolFilter.Include = []string{"[bad"} }), profiles.APIKey{}, "tool_filter.include"},
		{mod(func(p *model.Profile) { p.ToolFilter.Exclude = []string{""} }), profiles.APIKey{}, "tool_filter.exclude"},
		{mod(func(p *model.Profile) { p.Approval.Default = "maybe" }), profiles.APIKey{}, "approval.default"},
		{mod(func(p *model.Profile) { p.Approval.Rules = []model.ApprovalRule{{Tool: "x__*", Decision: "later"}} }), profiles.APIKey{}, "approval.rules.0.decision"},
		{mod(func(p *model.Profile) { p.Prices = &model.ChatPrices{InputPerMTok: -1} }), profiles.APIKey{}, "prices.input_per_mtok"},
		{mod(func(p *model.Profile) { p.APIKeyRef = "0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e" }), profiles.APIKey{}, "api_key_ref"},
		{mod(func(p *model.Profile) { p.Model = "other" }), profiles.APIKey{Value: " spaced "}, "api_key"},
		{mod(func(p *model.Profile) { p.Model = "other" }), profiles.APIKey{Value: secretKey2, Remove: true}, "api_key"},
	}
	for _, c := range cases {
		_, err := e.store.Put(ctx, c.p, c.key)
		wantErr(t, err, apierr.Validation, c.field)
	}
	if got := string(e.raw("base")); got != rawBefore {
		t.Fatalf("bad input changed the profile:\n%s\n%s", rawBefore, got)
	}
	if e.stored("base")["API_KEY"] != secretKey {
		t.Fatal("bad input changed the key")
	}
	_, err = e.store.Get(ctx, "a.b")
	wantErr(t, err, apierr.Validation, "name")

	// Without a credential service, a put with a key is refused before
	// anything is written; one without a key does not need it.
	e.stopCr()
	_, err = e.store.Put(ctx, profile("nocred"), profiles.APIKey{Value: secretKey})
	wantErr(t, err, apierr.ServiceUnavailable, "")
	if e.raw("nocred") != nil {
		t.Fatal("a put refused for want of the credential service stored the profile")
	}
	if _, err := e.store.Put(ctx, profile("nocred"), profiles.APIKey{}); err != nil {
		t.Fatal(err)
	}
}
