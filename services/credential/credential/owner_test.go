package credential_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/credential/credential"
)

// TestResolveOnlyForTheOwner: cred.resolve answers a runner only for a
// server it holds a lease on; the registry key only on cred.registry; every
// resolve leaves an audit event without a value.
func TestResolveOnlyForTheOwner(t *testing.T) {
	e := newEnv(t, func(o *credential.Options) { o.AnyResolver = false })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	assets, err := bus.EnsureAssets(ctx, js, bus.NewSubjects(""), bus.AssetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var events []model.CredEvent
	sub, err := e.nc.Subscribe("mcp.v1.events.cred.>", func(m *nats.Msg) {
		var ev model.CredEvent
		if json.Unmarshal(m.Data, &ev) == nil && ev.Type != model.CredChanged { // resolves only (feed_test.go has the changes)
			mu.Lock()
			events = append(events, ev)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()

	id := uuid.NewString()
	cfg, _ := json.Marshal(model.McpConfig{ID: id, Name: "Owned", Slug: "owned"})
	if _, err := assets.Configs.Put(ctx, id, cfg); err != nil {
		t.Fatal(err)
	}
	lease, _ := json.Marshal(map[string]any{"runner": "r1", "server": "owned", "replica": 0})
	if _, err := assets.Owners.Put(ctx, "server.owned.0", lease); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Set(ctx, model.CredSetRequest{ServerID: id, Credentials: model.Credentials{Env: map[string]string{"TOKEN": secretEnv}}}); err != nil {
		t.Fatal(err)
	}
	resolver := func(opts ...credclient.ResolverOption) *credclient.Resolver {
		r, err := credclient.NewResolver(e.nc, "", opts...)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if got, err := resolver(credclient.AsRunner("r1")).Resolve(ctx, id); err != nil || got.Env["TOKEN"] != secretEnv {
		t.Fatalf("the owner: %+v %v", got.Env, err)
	}
	if _, err := resolver(credclient.AsRunner("r2")).Resolve(ctx, id); apierr.Of(err) != apierr.Unauthorized {
		t.Fatalf("another runner: %v, want UNAUTHORIZED", err)
	}
	if _, err := resolver().Resolve(ctx, id); apierr.Of(err) != apierr.Validation {
		t.Fatalf("no runner id: %v, want VALIDATION_ERROR", err)
	}
	if _, err := resolver(credclient.AsRunner("r1")).Resolve(ctx, uuid.NewString()); apierr.Of(err) != apierr.NotFound {
		t.Fatalf("an unknown server: %v, want NOT_FOUND", err)
	}
	// The registry key: only on cred.registry, and nothing else there.
	if _, err := e.client.Set(ctx, model.CredSetRequest{ServerID: model.RegistryCredentialsID, Kind: model.CredRegistry,
		Credentials: model.Credentials{Env: map[string]string{"SMITHERY_API_KEY": secretEnv}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := resolver(credclient.AsRunner("r1")).Resolve(ctx, model.RegistryCredentialsID); apierr.Of(err) != apierr.Validation {
		t.Fatalf("registry key on cred.resolve: %v", err)
	}
	if got, err := resolver(credclient.ForRegistry()).Resolve(ctx, model.RegistryCredentialsID); err != nil || got.Env["SMITHERY_API_KEY"] != secretEnv {
		t.Fatalf("registry key on cred.registry: %v", err)
	}
	if _, err := resolver(credclient.ForRegistry()).Resolve(ctx, id); apierr.Of(err) != apierr.Validation {
		t.Fatalf("a server's secrets on cred.registry: %v", err)
	}

	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(events)
		mu.Unlock()
		if n >= 7 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	var resolved, refused int
	for _, ev := range events {
		switch ev.Type {
		case model.CredResolved:
			resolved++
		case model.CredRefused:
			refused++
			if ev.Code == "" {
				t.Errorf("refusal without a code: %+v", ev)
			}
		}
	}
	if resolved != 2 || refused != 5 {
		t.Fatalf("audit events: %d resolved, %d refused, want 2 and 5: %+v", resolved, refused, events)
	}
	if ev := events[0]; ev.Runner != "r1" || ev.ServerID != id || ev.Via != "resolve" {
		t.Fatalf("first event %+v", ev)
	}
}

// TestResolveOnlyUnderALeaseOfTheConfig: any runner may write the lease
// bucket, so a lease a runner writes for itself under a replica the config
// does not have (server.<slug>.5 of a server of one replica) opens nothing:
// only the replicas the runners lease count, and taking one of those over
// displaces its holder (docs/security.md, "Limits").
func TestResolveOnlyUnderALeaseOfTheConfig(t *testing.T) {
	e := newEnv(t, func(o *credential.Options) { o.AnyResolver = false })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	assets, err := bus.EnsureAssets(ctx, js, bus.NewSubjects(""), bus.AssetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	id := uuid.NewString()
	cfg, _ := json.Marshal(model.McpConfig{ID: id, Name: "Two", Slug: "two", Runtime: model.Runtime{Replicas: 2}})
	if _, err := assets.Configs.Put(ctx, id, cfg); err != nil {
		t.Fatal(err)
	}
	legit, _ := json.Marshal(model.Lease{Runner: "r1", Server: "two", Replica: 0})
	if _, err := assets.Owners.Put(ctx, "server.two.0", legit); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Set(ctx, model.CredSetRequest{ServerID: id, Credentials: model.Credentials{Env: map[string]string{"TOKEN": secretEnv}}}); err != nil {
		t.Fatal(err)
	}
	mallory, err := credclient.NewResolver(e.nc, "", credclient.AsRunner("mallory"))
	if err != nil {
		t.Fatal(err)
	}
	// A lease of its own beyond the config's replicas: refused.
	forged, _ := json.Marshal(model.Lease{Runner: "mallory", Server: "two", Replica: 5})
	if _, err := assets.Owners.Put(ctx, "server.two.5", forged); err != nil {
		t.Fatal(err)
	}
	if got, err := mallory.Resolve(ctx, id); apierr.Of(err) != apierr.Unauthorized {
		t.Fatalf("a lease outside the config's replicas: %+v %v, want UNAUTHORIZED", got.Env, err)
	}
	// The second replica the config asks for is a real lease: answered.
	second, _ := json.Marshal(model.Lease{Runner: "mallory", Server: "two", Replica: 1})
	if _, err := assets.Owners.Put(ctx, "server.two.1", second); err != nil {
		t.Fatal(err)
	}
	if got, err := mallory.Resolve(ctx, id); err != nil || got.Env["TOKEN"] != secretEnv {
		t.Fatalf("the holder of replica 1: %+v %v", got.Env, err)
	}
}
