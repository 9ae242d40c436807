package credential_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/credential/store"
)

// TestForgetRemovesOnePrincipalEverywhere: cred.forget deletes a
// principal's own record of every configured server, one written before
// records kept their server included, announces each as a change (the
// runners close the principal's upstream sessions on it), and leaves
// another principal's records and the servers' own.
func TestForgetRemovesOnePrincipalEverywhere(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	if _, err := e.client.Forget(ctx, "agent:gone"); err != nil {
		t.Fatalf("forget before any server is configured: %v", err)
	}
	js, err := jetstream.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	configs, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bus.BucketConfigs})
	if err != nil {
		t.Fatal(err)
	}
	serverA, serverB := uuid.NewString(), uuid.NewString()
	for _, id := range []string{serverA, serverB} {
		if _, err := configs.Put(ctx, id, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	header := model.Credentials{Headers: map[string]string{"X-Api-Key": secretHeader}}
	set := func(server, who string) string {
		t.Helper()
		id := model.PrincipalCredentialID(server, who)
		if _, err := e.client.Set(ctx, model.CredSetRequest{ServerID: id, Kind: model.CredPrincipal, Credentials: header,
			For: &model.PrincipalOf{ServerID: server, Principal: who}}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	goneA, keptA := set(serverA, "agent:gone"), set(serverA, "agent:kept")
	// Written before records kept their server: no owner.
	goneB := model.PrincipalCredentialID(serverB, "agent:gone")
	if err := e.store.Put(ctx, store.Key(model.CredPrincipal, goneB), header); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Set(ctx, model.CredSetRequest{ServerID: serverA, Credentials: header}); err != nil {
		t.Fatal(err)
	}
	events, err := e.nc.SubscribeSync("mcp.v1.events.cred.*")
	if err != nil {
		t.Fatal(err)
	}

	out, err := e.client.Forget(ctx, "agent:gone")
	if err != nil || out.Removed != 2 || out.Principal != "agent:gone" {
		t.Fatalf("forget: %+v %v, want 2 removed", out, err)
	}
	for key, want := range map[string]bool{
		store.Key(model.CredPrincipal, goneA): false, store.Key(model.CredPrincipal, goneB): false,
		store.Key(model.CredPrincipal, keptA): true, store.Key(model.CredServer, serverA): true,
	} {
		_, _, err := e.store.Get(ctx, key)
		if got := err == nil; got != want {
			t.Errorf("record %s stored: %v (%v), want %v", key, got, err, want)
		}
	}
	changed := map[string]bool{}
	for range 2 {
		m, err := events.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("change events: %v (got %v)", err, changed)
		}
		changed[m.Subject] = true
	}
	for _, id := range []string{goneA, goneB} {
		if !changed["mcp.v1.events.cred."+id] {
			t.Errorf("no change event of %s: %v", id, changed)
		}
	}
	if out, err := e.client.Forget(ctx, "agent:gone"); err != nil || out.Removed != 0 {
		t.Fatalf("forget again: %+v %v, want 0", out, err)
	}
	if _, err := e.raw("forget", model.CredForgetRequest{}); err == nil || err.Code != apierr.Validation {
		t.Fatalf("forget without a principal: %v, want VALIDATION_ERROR", err)
	}
}
