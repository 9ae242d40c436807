package credential_test

import (
	"testing"

	"github.com/google/uuid"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/credential/store"
)

// TestServerDeleteRemovesItsPrincipals: a principal's own record keeps the
// server it is for (from the writer's for, or bound at its first resolve when
// written before), and the delete of that server's whole record with
// principals removes it, and only it: another server's principals, and the
// server's records without principals, stay. A for that does not name the
// record, or an owner smuggled in the sealed secrets, is refused.
func TestServerDeleteRemovesItsPrincipals(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	serverA, serverB := uuid.NewString(), uuid.NewString()
	header := model.Credentials{Headers: map[string]string{"X-Api-Key": secretHeader}}
	setFor := func(server, who string) string {
		t.Helper()
		id := model.PrincipalCredentialID(server, who)
		if _, err := e.client.Set(ctx, model.CredSetRequest{ServerID: id, Kind: model.CredPrincipal, Credentials: header,
			For: &model.PrincipalOf{ServerID: server, Principal: who}}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	stored := func(id string) bool {
		t.Helper()
		_, _, err := e.store.Get(ctx, store.Key(model.CredPrincipal, id))
		if err != nil && err != store.ErrNotFound {
			t.Fatal(err)
		}
		return err == nil
	}

	aliceA, bobA, aliceB := setFor(serverA, "key:alice"), setFor(serverA, "key:bob"), setFor(serverB, "key:alice")
	if rec, _, _ := e.store.Get(ctx, store.Key(model.CredPrincipal, aliceA)); rec.Owner != serverA {
		t.Fatalf("alice's record of A keeps owner %q", rec.Owner)
	}
	// Written before records kept their server (no for): bound by the
	// resolve that names both.
	carol := model.PrincipalCredentialID(serverA, "key:carol")
	if err := e.store.Put(ctx, store.Key(model.CredPrincipal, carol), header); err != nil {
		t.Fatal(err)
	}
	res, err := credclient.NewResolver(e.nc, "")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := res.ResolveFor(ctx, serverA, "key:carol"); err != nil || got.Headers["X-Api-Key"] != secretHeader {
		t.Fatalf("carol's resolve: %+v, %v", got, err)
	}
	if rec, _, _ := e.store.Get(ctx, store.Key(model.CredPrincipal, carol)); rec.Owner != serverA {
		t.Fatalf("carol's record after a resolve keeps owner %q", rec.Owner)
	}

	// Refused, and nothing written: a for naming another record, for on a
	// server's record, principals without a whole server delete, an owner
	// in the secrets.
	dave := model.PrincipalCredentialID(serverA, "key:dave")
	for name, req := range map[string]model.CredSetRequest{
		"for of another principal": {ServerID: dave, Kind: model.CredPrincipal, Credentials: header, For: &model.PrincipalOf{ServerID: serverA, Principal: "key:alice"}},
		"for on a server's record": {ServerID: serverA, Credentials: header, For: &model.PrincipalOf{ServerID: serverA, Principal: "key:dave"}},
		"owner in the secrets": {ServerID: dave, Kind: model.CredPrincipal,
			Credentials: model.Credentials{Headers: header.Headers, Owner: serverB}},
	} {
		if _, err := e.raw("set", req); err == nil || err.Code != apierr.Validation {
			t.Errorf("%s: %v", name, err)
		}
	}
	if stored(dave) {
		t.Fatal("a refused set wrote dave's record")
	}
	if _, err := e.raw("delete", model.CredDeleteRequest{ServerID: serverA, Names: []string{"X"}, Principals: true}); err == nil || err.Code != apierr.Validation {
		t.Errorf("principals with names: %v", err)
	}

	// The server's own delete (as the CLI's cred delete) leaves them.
	if _, err := e.client.Delete(ctx, model.CredDeleteRequest{ServerID: serverA}); err != nil {
		t.Fatal(err)
	}
	if !stored(aliceA) || !stored(bobA) || !stored(carol) {
		t.Fatal("a delete without principals removed a principal's record")
	}
	// The config service's delete of the server takes its principals'.
	if _, err := e.client.Delete(ctx, model.CredDeleteRequest{ServerID: serverA, Principals: true}); err != nil {
		t.Fatal(err)
	}
	if stored(aliceA) || stored(bobA) || stored(carol) {
		t.Fatal("a principal's record of the deleted server is still stored")
	}
	if !stored(aliceB) {
		t.Fatal("the delete of A removed alice's record of B")
	}
}
