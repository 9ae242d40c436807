package vaultstore_test

import (
	"reflect"
	"testing"

	"github.com/google/uuid"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/services/credential/store/vaultstore"
)

// TestRecoversAfterSealed: Vault answers as a sealed Vault does (503) for a
// while, then as before (as after an unseal: vaultdev keeps no unseal key, so
// a proxy plays the sealed part); the same store serves again, no restart.
func TestRecoversAfterSealed(t *testing.T) {
	t.Parallel() // each test has its own Vault
	v := startVault(t)
	ctx := ctxT(t)
	fv := newFlakyVault(t, v)
	cfg := vaultstore.Config{Address: fv.URL, Token: v.token(t, "1h", ""), MaxRetries: -1}
	s, err := vaultstore.New(ctx, cfg, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	id := uuid.NewString()
	if err := s.Put(ctx, id, sample()); err != nil {
		t.Fatal(err)
	}
	fv.sealed.Store(true)
	if _, _, err := s.Get(ctx, id); apierr.Of(err) != apierr.ServiceUnavailable {
		t.Fatalf("Get while sealed: %v", err)
	}
	if err := s.Ping(ctx); err == nil {
		t.Fatal("ready while sealed")
	}
	fv.sealed.Store(false)
	if got, _, err := s.Get(ctx, id); err != nil || !reflect.DeepEqual(got, sample()) {
		t.Fatalf("Get after the unseal: %v", err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("not ready after the unseal: %v", err)
	}

	// Sealed from the start: New does not fail, and the first request
	// after the unseal logs in and works.
	fv.sealed.Store(true)
	late, err := vaultstore.New(ctx, cfg, quietLog())
	if err != nil {
		t.Fatalf("New with Vault sealed: %v", err)
	}
	t.Cleanup(late.Close)
	if _, _, err := late.Get(ctx, id); apierr.Of(err) != apierr.ServiceUnavailable {
		t.Fatalf("Get while sealed from the start: %v", err)
	}
	fv.sealed.Store(false)
	if got, _, err := late.Get(ctx, id); err != nil || !reflect.DeepEqual(got, sample()) {
		t.Fatalf("Get after the unseal: %v", err)
	}
}
