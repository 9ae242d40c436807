package configflow

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	vault "github.com/hashicorp/vault/api"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/vaulttest"
	"github.com/mcpbus/mcpbus/services/credential/credential"
	"github.com/mcpbus/mcpbus/services/credential/store/vaultstore"
	"github.com/mcpbus/mcpbus/tools/mcpbus/stack"
)

// repoFile is a path in the repository, found from this file's location.
func repoFile(t *testing.T, rel string) string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("runtime.Caller failed")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", rel)
}

// The whole system on a real Vault, logged in with a token of the policy we
// ship (deploy/vault/mcpbus-policy.hcl): secrets land in Vault, reach the
// server, go away with it; a sealed Vault refuses writes and nothing is saved.
func TestVaultBackend(t *testing.T) {
	v := vaulttest.Start(t)
	root, err := vault.NewClient(&vault.Config{Address: v.Addr})
	if err != nil {
		t.Fatal(err)
	}
	root.SetToken(v.Token)
	policy, err := os.ReadFile(repoFile(t, "deploy/vault/mcpbus-policy.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	if err := root.Sys().PutPolicy("mcpbus", string(policy)); err != nil {
		t.Fatal(err)
	}
	tok, err := root.Auth().Token().Create(&vault.TokenCreateRequest{Policies: []string{"mcpbus"}, TTL: "1h", NoDefaultPolicy: true})
	if err != nil {
		t.Fatal(err)
	}
	e := startStack(t, func(o *stack.Options) {
		o.Credential.Backend = credential.BackendVault
		o.Credential.Vault = vaultstore.Config{Address: v.Addr, Token: tok.Auth.ClientToken, Timeout: 3 * time.Second, MaxRetries: -1}
	})
	ctx := ctxFor(t, 2*time.Minute)

	cfg := binary("Vaulted")
	cfg.EnvVars = map[string]model.EnvVar{"VAULTED_TOKEN": {IsSecret: true, Required: true}}
	saved, err := e.Client.CreateConfig(ctx, cfg, &model.Credentials{Env: map[string]string{"VAULTED_TOKEN": "from-vault-5150"}})
	if err != nil {
		t.Fatal(err)
	}
	// The record is in Vault at the documented path, not on disk.
	sec, err := root.KVv2("secret").Get(ctx, "mcpbus/server/"+saved.ID)
	if err != nil || !strings.Contains(strings.Join(mapValues(sec.Data), " "), "from-vault-5150") {
		t.Fatalf("vault record: %+v %v", sec, err)
	}
	if _, err := os.Stat(filepath.Join(e.dataDir, "secrets")); !os.IsNotExist(err) {
		t.Fatalf("the vault backend wrote a local secrets dir: %v", err)
	}
	if _, err := e.Client.SetEnabled(ctx, saved.Slug, true); err != nil {
		t.Fatal(err)
	}
	if got := e.callText(t, saved.Slug, "env_sha256", `{"name":"VAULTED_TOKEN"}`); got != sha("from-vault-5150") {
		t.Fatal("the Vault secret did not reach the child")
	}
	if _, err := e.Client.DeleteConfig(ctx, saved.Slug); err != nil {
		t.Fatal(err)
	}
	if m, err := root.KVv2("secret").GetMetadata(ctx, "mcpbus/"+saved.ID); err == nil {
		t.Fatalf("vault metadata left after delete: %+v", m)
	}

	// Sealed: writes fail with SERVICE_UNAVAILABLE and nothing is saved.
	if err := root.Sys().Seal(); err != nil {
		t.Fatal(err)
	}
	_, err = e.Client.CreateConfig(ctx, cfg, &model.Credentials{Env: map[string]string{"VAULTED_TOKEN": "x"}})
	if apierr.Of(err) != apierr.ServiceUnavailable {
		t.Fatalf("create with a sealed vault: %v", err)
	}
	if list, err := e.Client.ListConfigs(ctx); err != nil || len(list) != 0 {
		t.Fatalf("a create failed on a sealed vault but left %d configs (%v)", len(list), err)
	}
	other, err := e.Client.CreateConfig(ctx, binary("No Secrets"), nil)
	if err != nil {
		t.Fatalf("a config without secrets needs no vault: %v", err)
	}
	_, err = credclient.New(e.Conn, "").Set(ctx, model.CredSetRequest{ServerID: other.ID, Credentials: model.Credentials{Env: map[string]string{"A_TOKEN": "y"}}})
	if apierr.Of(err) != apierr.ServiceUnavailable {
		t.Fatalf("cred set on a sealed vault: %v", err)
	}
}

func mapValues(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, strings.TrimSpace(strings.ReplaceAll(toString(v), "\n", " ")))
	}
	return out
}

func toString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case map[string]any:
		return strings.Join(mapValues(x), " ")
	}
	return ""
}
