package audit

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/nats-io/nkeys"

	"github.com/mcpbus/mcpbus/libs/access"
)

// Identity is who holds a public key: its name and role.
type Identity struct {
	Name string `json:"name"`
	Role string `json:"role"`
}

// Keys are the trusted public keys (U…) of the writers.
type Keys map[string]Identity

// envLine is a line of `mcpbus identities`: MCPBUS_<NAME>_NKEY=<key>.
var envLine = regexp.MustCompile(`^MCPBUS_([A-Z0-9_]+)_NKEY=(U[A-Z2-7]{55})$`)

// ReadKeys reads the public keys as `mcpbus identities` prints them
// (MCPBUS_RUNNER_1_NKEY=U…: identity runner-1 of role runner); roles are
// those of roles.
func ReadKeys(r io.Reader, roles []string) (Keys, error) {
	keys := Keys{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := envLine.FindStringSubmatch(line)
		if m == nil || !nkeys.IsValidPublicUserKey(m[2]) {
			return nil, fmt.Errorf("keys line %d: want MCPBUS_<NAME>_NKEY=U… as mcpbus identities prints", n)
		}
		name := strings.ToLower(strings.ReplaceAll(m[1], "_", "-"))
		role, _, _ := strings.Cut(name, "-")
		known := false
		for _, r := range roles {
			known = known || r == role
		}
		if !known {
			return nil, fmt.Errorf("keys line %d: %s is of no role", n, name)
		}
		keys[m[2]] = Identity{Name: name, Role: role}
	}
	return keys, sc.Err()
}

// SeedKeys are the public keys of the service identities whose seeds
// (<name>.nk) are in dir, as mcpbus up keeps them (<data dir>/nats); agents
// write no audit records and are left out. Each seed is wiped once its
// public key is known.
func SeedKeys(dir string) (Keys, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*"+access.SeedExt))
	if err != nil {
		return nil, err
	}
	keys := Keys{}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), access.SeedExt)
		role, _, _ := strings.Cut(name, "-")
		if _, err := access.RoleOf(role); err != nil {
			continue
		}
		seed, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
		clear(seed)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		pub, _ := kp.PublicKey()
		kp.Wipe()
		keys[pub] = Identity{Name: name, Role: role}
	}
	return keys, nil
}
