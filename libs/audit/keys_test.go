package audit

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/mcpbus/mcpbus/libs/access"
)

// TestDeploymentKeysRead: the keys file a per-role deployment writes for its
// verifiers (the compose gateway's and cli's MCPBUS_AUDIT_KEYS) names every
// identity with its role.
func TestDeploymentKeysRead(t *testing.T) {
	dir := t.TempDir()
	ids, err := access.ProvisionDeployment(dir, "mcp.v1", nil, 3)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(access.RoleDir(dir, access.Gateway), access.AuditKeysFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var roles []string
	for _, r := range access.ServiceRoles() {
		roles = append(roles, string(r))
	}
	keys, err := ReadKeys(f, roles)
	if err != nil || len(keys) != len(ids) {
		t.Fatalf("%d keys (%v) for %d identities", len(keys), err, len(ids))
	}
	for _, id := range ids {
		if got := keys[id.Public]; got.Name != id.Name || got.Role != string(id.Role) {
			t.Errorf("%s: read as %+v", id.Name, got)
		}
	}
}
