package vaultstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/credential/store/vaultstore"
)

// These tests need no Vault: nothing listens at the address.

func TestUnreachableVault(t *testing.T) {
	t.Parallel()
	for _, retries := range []int{-1, 1} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := vaultstore.New(ctx, vaultstore.Config{Address: "http://127.0.0.1:1", Token: "s.some-token-value", MaxRetries: retries}, quietLog())
		if err != nil {
			t.Fatalf("New must not fail while Vault is down: %v", err)
		}
		defer s.Close()
		id := uuid.NewString()
		checks := map[string]error{
			"put":    s.Put(ctx, id, model.Credentials{Env: map[string]string{"A": "b"}}),
			"delete": s.Delete(ctx, id),
		}
		_, _, checks["get"] = s.Get(ctx, id)
		for op, err := range checks {
			e := apierr.From(err)
			if err == nil || e.Code != apierr.ServiceUnavailable {
				t.Errorf("retries %d, %s: %v, want SERVICE_UNAVAILABLE", retries, op, err)
			}
			if strings.Contains(e.Message, "some-token-value") {
				t.Errorf("%s: error names the token: %s", op, e.Message)
			}
		}
	}
}

func TestConfig(t *testing.T) {
	t.Setenv("VAULT_ADDR", "http://vault.example:8200")
	t.Setenv("VAULT_TOKEN", "tok")
	t.Setenv("MCPBUS_VAULT_MOUNT", "kv")
	t.Setenv("MCPBUS_VAULT_ROLE_ID", "role")
	t.Setenv("MCPBUS_VAULT_SECRET_ID", "sec")
	got := vaultstore.ConfigFromEnv()
	want := vaultstore.Config{Address: "http://vault.example:8200", Token: "tok", Mount: "kv", RoleID: "role", SecretID: "sec"}
	if got != want {
		t.Fatalf("ConfigFromEnv = %+v, want %+v", got, want)
	}
	// Without a token or a full AppRole pair there is nothing to log in with.
	for _, c := range []vaultstore.Config{{Address: "http://127.0.0.1:1"}, {Address: "http://127.0.0.1:1", RoleID: "r"}} {
		if _, err := vaultstore.New(context.Background(), c, quietLog()); err == nil || !strings.Contains(err.Error(), "VAULT_TOKEN") {
			t.Errorf("New(%+v): %v", c, err)
		}
	}
	// VAULT_TOKEN in the environment is not used behind the config's back.
	t.Setenv("VAULT_TOKEN", "env-token")
	s, err := vaultstore.New(context.Background(), vaultstore.Config{Address: "http://127.0.0.1:1", Token: "configured", MaxRetries: -1}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Token() != "configured" {
		t.Fatalf("token in use: %q", s.Token())
	}
}

// TestSkipVerifyRefused: VAULT_SKIP_VERIFY (read by the Vault client from
// the environment) is refused unless MCPBUS_VAULT_INSECURE_SKIP_VERIFY=true
// accepts it too; nothing else turns certificate checks off.
func TestSkipVerifyRefused(t *testing.T) {
	t.Setenv("VAULT_SKIP_VERIFY", "true")
	t.Setenv(vaultstore.EnvInsecureSkipVerify, "")
	cfg := vaultstore.Config{Address: "https://127.0.0.1:1", Token: "hvs.x", MaxRetries: -1}
	_, err := vaultstore.New(context.Background(), cfg, quietLog())
	if err == nil || !strings.Contains(err.Error(), "VAULT_CACERT") || !strings.Contains(err.Error(), vaultstore.EnvInsecureSkipVerify) {
		t.Fatalf("VAULT_SKIP_VERIFY alone: %v, want a refusal", err)
	}
	for _, v := range []string{"1", "yes", "True "} {
		t.Setenv(vaultstore.EnvInsecureSkipVerify, v)
		if vaultstore.ConfigFromEnv().InsecureSkipVerify {
			t.Errorf("%s=%q accepted as true", vaultstore.EnvInsecureSkipVerify, v)
		}
	}
	t.Setenv(vaultstore.EnvInsecureSkipVerify, "true")
	cfg.InsecureSkipVerify = vaultstore.ConfigFromEnv().InsecureSkipVerify
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := vaultstore.New(ctx, cfg, quietLog())
	if err != nil {
		t.Fatalf("with both: %v", err)
	}
	s.Close()
	t.Setenv("VAULT_SKIP_VERIFY", "false")
	t.Setenv(vaultstore.EnvInsecureSkipVerify, "")
	s, err = vaultstore.New(ctx, vaultstore.Config{Address: "https://127.0.0.1:1", Token: "hvs.x", MaxRetries: -1}, quietLog())
	if err != nil {
		t.Fatalf("VAULT_SKIP_VERIFY=false: %v", err)
	}
	s.Close()
}
