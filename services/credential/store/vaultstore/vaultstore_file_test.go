package vaultstore_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/services/credential/store/vaultstore"
)

func TestConfigFiles(t *testing.T) {
	t.Setenv("VAULT_ADDR", "http://vault.example:8200")
	t.Setenv("VAULT_TOKEN", "")
	t.Setenv("MCPBUS_VAULT_ROLE_ID", "")
	t.Setenv("MCPBUS_VAULT_SECRET_ID", "")
	t.Setenv("MCPBUS_VAULT_ROLE_ID_FILE", "/run/secrets/vault/role_id")
	t.Setenv("MCPBUS_VAULT_SECRET_ID_FILE", "/run/secrets/vault/secret_id")
	got := vaultstore.ConfigFromEnv()
	want := vaultstore.Config{Address: "http://vault.example:8200", RoleIDFile: "/run/secrets/vault/role_id", SecretIDFile: "/run/secrets/vault/secret_id"}
	if got != want {
		t.Fatalf("ConfigFromEnv = %+v, want %+v", got, want)
	}
	// A value and a file for the same thing is a mistake; a file alone is enough.
	for _, c := range []vaultstore.Config{
		{Address: "http://127.0.0.1:1", RoleID: "r", RoleIDFile: "/f", SecretIDFile: "/g"},
		{Address: "http://127.0.0.1:1", RoleIDFile: "/f", SecretID: "s", SecretIDFile: "/g"},
	} {
		if _, err := vaultstore.New(context.Background(), c, quietLog()); err == nil || !strings.Contains(err.Error(), "not both") {
			t.Errorf("New(%+v): %v", c, err)
		}
	}
	if _, err := vaultstore.New(context.Background(), vaultstore.Config{Address: "http://127.0.0.1:1", RoleIDFile: "/f"}, quietLog()); err == nil {
		t.Error("a role id file without a secret id was accepted")
	}
	s, err := vaultstore.New(context.Background(), vaultstore.Config{Address: "http://127.0.0.1:1", RoleID: "r", SecretIDFile: "/nonexistent", MaxRetries: -1}, quietLog())
	if err != nil {
		t.Fatalf("a missing file must not stop the start (it may appear later): %v", err)
	}
	s.Close()
}

// TestAppRoleFromFiles: the AppRole pair read from files (as the compose
// deployment mounts them), re-read at each login: a rotated secret id is
// used from the next login on. A file others may read is refused.
func TestAppRoleFromFiles(t *testing.T) {
	t.Parallel() // each test has its own Vault
	v := startVault(t)
	ctx := ctxT(t)
	roleID, secretID := enableAppRole(t, v, "1h", "2h")
	dir := t.TempDir()
	roleFile, secretFile := filepath.Join(dir, "role_id"), filepath.Join(dir, "secret_id")
	write := func(path, value string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(path, []byte(value+"\n"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
	}
	write(roleFile, roleID, 0o600)
	write(secretFile, secretID, 0o644)

	open := v.store(t, vaultstore.Config{RoleIDFile: roleFile, SecretIDFile: secretFile})
	err := open.Put(ctx, uuid.NewString(), sample())
	if e := apierr.From(err); e.Code != apierr.Unauthorized || !strings.Contains(e.Message, "MCPBUS_VAULT_SECRET_ID_FILE") || strings.Contains(e.Error(), secretID) {
		t.Fatalf("a world-readable secret id file: %v", err)
	}

	write(secretFile, secretID, 0o600)
	s := v.store(t, vaultstore.Config{RoleIDFile: roleFile, SecretIDFile: secretFile})
	id := uuid.NewString()
	if err := s.Put(ctx, id, sample()); err != nil {
		t.Fatal(err)
	}
	// Rotate: a new secret id in the file, the old one destroyed, the token
	// revoked. The next request logs in again with the new secret id.
	sec, err := v.root.Logical().Write("auth/approle/role/mcpbus-credential/secret-id", nil)
	if err != nil {
		t.Fatal(err)
	}
	write(secretFile, sec.Data["secret_id"].(string), 0o600)
	if _, err := v.root.Logical().Write("auth/approle/role/mcpbus-credential/secret-id/destroy", map[string]any{"secret_id": secretID}); err != nil {
		t.Fatal(err)
	}
	first := s.Token()
	if err := v.root.Auth().Token().RevokeOrphan(first); err != nil {
		t.Fatal(err)
	}
	if got, _, err := s.Get(ctx, id); err != nil || !reflect.DeepEqual(got, sample()) {
		t.Fatalf("after rotating the secret id: %v", err)
	}
	if s.Token() == first {
		t.Fatal("still the revoked token")
	}
}
