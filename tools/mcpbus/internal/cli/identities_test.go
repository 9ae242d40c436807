package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpbus/mcpbus/libs/access"
)

// TestIdentitiesPerRole: --per-role gives each role its own directory and
// nats-server its files; a second run keeps the keys; --routes needs it.
func TestIdentitiesPerRole(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ids")
	run := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Main(args, strings.NewReader(""), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	args := []string{"identities", dir, "--per-role", "--routes", "nats://nats-1:6222,nats://nats-2:6222"}
	code, first, stderr := run(args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, role := range access.ServiceRoles() {
		names := []string{string(role)}
		if role == access.Runner {
			names = access.RunnerNames(3) // one per runner instance, by default three
		}
		for _, name := range names {
			if !strings.Contains(first, "MCPBUS_"+strings.ToUpper(strings.ReplaceAll(name, "-", "_"))+"_NKEY=U") {
				t.Errorf("no public key of %s printed: %s", name, first)
			}
			if _, err := os.Stat(filepath.Join(dir, string(role), name+access.SeedExt)); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
	}
	for _, f := range []string{access.AuthConfFile, access.RoutesConfFile} {
		if _, err := os.Stat(filepath.Join(dir, access.NATSDir, f)); err != nil {
			t.Error(err)
		}
	}
	if _, again, _ := run(args...); again != first {
		t.Errorf("a second run changed the keys:\n%s\n%s", first, again)
	}
	if code, _, stderr := run("identities", filepath.Join(t.TempDir(), "flat"), "--routes", "nats://nats-1:6222"); code == 0 || !strings.Contains(stderr, "--per-role") {
		t.Errorf("--routes without --per-role: exit %d, %s", code, stderr)
	}
}
