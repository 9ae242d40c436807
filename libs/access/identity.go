package access

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/mcpbus/mcpbus/libs/secretfile"
)

// Identity is one user on the bus: a name, a role and an nkey.
type Identity struct {
	Name string
	Role Role
	// Seed is the nkey seed (secret: it never leaves the data dir's file).
	Seed []byte
	// Public is the nkey's public key (U…), what the server knows.
	Public string
}

// Inbox is the identity's private reply prefix.
func (id Identity) Inbox() string { return Inbox(id.Name) }

// SeedExt ends the name of a seed file.
const SeedExt = ".nk"

// Store keeps identities' seeds in a directory: 0700, one 0600 file each,
// <name>.nk, reused after the first start.
type Store struct{ dir string }

// OpenStore opens (creating) the directory.
func OpenStore(dir string) (*Store, error) {
	dir, err := filepath.Abs(dir) // seed paths are printed for use from anywhere
	if err != nil {
		return nil, fmt.Errorf("identities: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("identities: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("identities: %w", err)
	}
	return &Store{dir: dir}, nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// SeedFile is where name's seed is kept.
func (s *Store) SeedFile(name string) string { return filepath.Join(s.dir, name+SeedExt) }

// Ensure loads name's identity, making it on first use.
func (s *Store) Ensure(name string, role Role) (Identity, error) {
	if !validName(name) {
		return Identity{}, fmt.Errorf("identity name %q: use [a-z0-9_-]", name)
	}
	seed, err := secretfile.LoadOrCreate(s.SeedFile(name), 256, func() ([]byte, error) {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return nil, err
		}
		return kp.Seed()
	})
	if err != nil {
		return Identity{}, fmt.Errorf("identity %s: %w", name, err)
	}
	return identityOf(name, role, seed)
}

func identityOf(name string, role Role, seed []byte) (Identity, error) {
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
	if err != nil {
		return Identity{}, fmt.Errorf("identity %s: bad seed: %w", name, err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return Identity{}, fmt.Errorf("identity %s: %w", name, err)
	}
	return Identity{Name: name, Role: role, Seed: []byte(strings.TrimSpace(string(seed))), Public: pub}, nil
}

func validName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// User is the server-side user of an identity with its role's permissions.
func User(id Identity, prefix string, extraPublish ...string) (*server.NkeyUser, error) {
	p, err := ForIdentity(id, prefix, extraPublish...)
	if err != nil {
		return nil, err
	}
	return userOf(id, p), nil
}

// AgentUser is the server-side user of agent name's identity (AgentPerms).
func AgentUser(id Identity, prefix, name string, allow []string) (*server.NkeyUser, error) {
	p, err := AgentPerms(prefix, name, allow)
	if err != nil {
		return nil, err
	}
	return userOf(id, p), nil
}

func userOf(id Identity, p Perms) *server.NkeyUser {
	return &server.NkeyUser{Nkey: id.Public, Permissions: &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: p.Publish, Deny: p.DenyPublish},
		Subscribe: &server.SubjectPermission{Allow: p.Subscribe},
	}}
}
