package credential_test

import (
	"context"
	"os"
	"testing"

	"github.com/google/uuid"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/credential/store"
)

// A server whose id equals a chat profile's credential id (possible for a
// server stored before server ids had to be v4) reaches nothing of the
// profile's record: resolving it gets nothing, deleting it leaves the key.
func TestKindsDoNotCollide(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	profileID := model.ChatProfileCredentialID("work")
	if _, err := e.client.Set(ctx, model.CredSetRequest{ServerID: profileID, Kind: model.CredChatProfile,
		Credentials: model.Credentials{Env: map[string]string{model.ChatAPIKeyEnv: secretEnv}}}); err != nil {
		t.Fatal(err)
	}
	res, err := credclient.NewResolver(e.nc, "", credclient.AsRunner("r1"))
	if err != nil {
		t.Fatal(err)
	}
	// The server with the profile's id: no secret of the profile's.
	got, err := res.Resolve(ctx, profileID)
	if err != nil || len(got.Env) != 0 {
		t.Fatalf("a server resolving the profile's id: %+v, %v", got.Env, err)
	}
	if d, err := e.client.Describe(ctx, model.CredDescribeRequest{ServerID: profileID}); err != nil || d.Has(model.ChatAPIKeyEnv) || d.Kind != model.CredServer {
		t.Fatalf("describe as a server: %+v, %v", d, err)
	}
	// Deleting "the server" deletes nothing of the profile's.
	if _, err := e.client.Delete(ctx, model.CredDeleteRequest{ServerID: profileID}); err != nil {
		t.Fatal(err)
	}
	if key, err := res.ChatKey(ctx, "work"); err != nil || key != secretEnv {
		t.Fatalf("the profile's key after the server's delete: %v", err)
	}
	// A server secret set under that id stays the server's.
	if _, err := e.client.Set(ctx, model.CredSetRequest{ServerID: profileID,
		Credentials: model.Credentials{Env: map[string]string{model.ChatAPIKeyEnv: secretHeader}}}); err != nil {
		t.Fatal(err)
	}
	if key, err := res.ChatKey(ctx, "work"); err != nil || key != secretEnv {
		t.Fatalf("the profile's key after a server's set: %v", err)
	}
	if d, err := e.client.Describe(ctx, model.CredDescribeRequest{ServerID: profileID, Kind: model.CredChatProfile}); err != nil || !d.Has(model.ChatAPIKeyEnv) || d.Kind != model.CredChatProfile {
		t.Fatalf("describe as the profile: %+v, %v", d, err)
	}
}

// A derived kind takes only derived (v5) ids, the registry kind only its
// one record; an unknown kind is refused; nothing is written.
func TestKindRefusals(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	creds := model.Credentials{Env: map[string]string{"A": secretEnv}}
	for _, tc := range []struct {
		kind  model.CredentialKind
		id    string
		field string
	}{
		{model.CredChatProfile, uuid.NewString(), "server_id"},
		{model.CredOAuthClient, uuid.NewString(), "server_id"},
		{model.CredRegistry, model.ChatProfileCredentialID("x"), "server_id"},
		{"profile", model.ChatProfileCredentialID("x"), "kind"},
	} {
		_, err := e.client.Set(ctx, model.CredSetRequest{ServerID: tc.id, Kind: tc.kind, Credentials: creds})
		if ae := apierr.From(err); err == nil || ae.Code != apierr.Validation || ae.Field != tc.field {
			t.Errorf("set kind %q id %s: %v, want VALIDATION_ERROR on %s", tc.kind, tc.id, err, tc.field)
		}
		if _, err := os.Stat(e.store.Path(store.Key(tc.kind, tc.id))); !os.IsNotExist(err) {
			t.Errorf("kind %q: a record was written (%v)", tc.kind, err)
		}
	}
}

// Records stored before kinds (a bare id) are found by the kind they can
// belong to and moved under it: a v5 id by a chat profile, a v4 id by its
// server; a server with a v5 id never reads a bare v5 record.
func TestLegacyRecordsMove(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	profileID := model.ChatProfileCredentialID("old")
	serverID := uuid.NewString()
	put := func(key string, env map[string]string) {
		if err := e.store.Put(context.Background(), key, model.Credentials{Env: env}); err != nil {
			t.Fatal(err)
		}
	}
	put(profileID, map[string]string{model.ChatAPIKeyEnv: secretEnv})
	put(serverID, map[string]string{"TOKEN": secretHeader})
	res, err := credclient.NewResolver(e.nc, "", credclient.AsRunner("r1"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := res.Resolve(ctx, profileID); err != nil || len(got.Env) != 0 {
		t.Fatalf("a server with the profile's id read the bare record: %+v, %v", got.Env, err)
	}
	if key, err := res.ChatKey(ctx, "old"); err != nil || key != secretEnv {
		t.Fatalf("the profile's bare record: %v", err)
	}
	if got, err := res.Resolve(ctx, serverID); err != nil || got.Env["TOKEN"] != secretHeader {
		t.Fatalf("the server's bare record: %+v, %v", got.Env, err)
	}
	for _, moved := range []struct{ from, to string }{
		{profileID, store.Key(model.CredChatProfile, profileID)},
		{serverID, store.Key(model.CredServer, serverID)},
	} {
		if _, err := os.Stat(e.store.Path(moved.from)); !os.IsNotExist(err) {
			t.Errorf("%s still there (%v)", moved.from, err)
		}
		if _, err := os.Stat(e.store.Path(moved.to)); err != nil {
			t.Errorf("%s: %v", moved.to, err)
		}
	}
	// A file copied from one kind's folder to another's does not open.
	data, err := os.ReadFile(e.store.Path(store.Key(model.CredChatProfile, profileID)))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(e.store.Dir()+"/server", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.store.Path(store.Key(model.CredServer, profileID)), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := res.Resolve(ctx, profileID); apierr.Of(err) != apierr.Internal || len(got.Env) != 0 {
		t.Fatalf("a copied file: %+v, %v", got.Env, err)
	}
}
