package access

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/mcpbus/mcpbus/libs/secretfile"
)

// The layout of a deployment's identities (mcpbus identities --per-role):
//
//	<dir>/<role>/<role>.nk   each role's seed, alone in its directory (0700,
//	                         the seed 0600), so a container mounts only its own
//	<dir>/runner/runner-<i>.nk  one seed per runner instance (--runners N):
//	                         each runner process claims one (natsconn.Claim),
//	                         so no two runners share an identity
//	<dir>/runner/runner.nk   the one runner seed of older builds, kept
//	                         authorized while it exists (LegacyRunner)
//	<dir>/nats/auth.conf     every role's nkey user with its public key and
//	                         permissions, for nats-server to include (0644)
//	<dir>/nats/routes.conf   the cluster's route credentials and routes, for
//	                         the cluster block to include (0600), with --routes
//	<dir>/nats/route.password  the route password, made once (0600)
//	<dir>/{gateway,operator}/audit-keys.env  every identity's public key
//	                         (KeysEnv), for those who verify the audit
//	                         chains: the gateway's endpoint, the operator's
//	                         CLI (0644)
const (
	NATSDir           = "nats"
	AuthConfFile      = "auth.conf"
	RoutesConfFile    = "routes.conf"
	RoutePasswordFile = "route.password"
	AuditKeysFile     = "audit-keys.env"
	// RouteUser is the user cluster nodes authenticate their routes with.
	RouteUser = "mcpbus-route"
)

// RoleDir is the directory of role's seed in a per-role layout.
func RoleDir(dir string, role Role) string { return filepath.Join(dir, string(role)) }

// ProvisionDeployment makes (or, when they exist, reads) the identity of
// every service role in dir, one directory per role, and writes what
// nats-server includes into <dir>/nats: auth.conf, rendered from the table
// with the public keys written out (nats-server parses an included file on
// its own, so $VARIABLES defined in another included file would not reach
// it), and, when routes are given, routes.conf: the route user and password
// every node requires of the others and the routes carrying them, so only
// nodes that can read the file join the cluster. Seeds and the route
// password are kept; the two .conf files are rewritten from the table of
// this version on every run.
func ProvisionDeployment(dir, prefix string, routes []string, runners int) ([]Identity, error) {
	if _, err := OpenStore(dir); err != nil { // the top directory: 0700
		return nil, err
	}
	var ids []Identity
	for _, role := range ServiceRoles() {
		st, err := OpenStore(RoleDir(dir, role))
		if err != nil {
			return nil, err
		}
		names := []string{string(role)}
		if role == Runner {
			names = RunnerNames(runners)
		}
		for _, name := range names {
			id, err := st.Ensure(name, role)
			if err != nil {
				return nil, err
			}
			ids = append(ids, id)
		}
		if role == Runner {
			id, found, err := LegacyRunner(dir)
			if err != nil {
				return nil, err
			}
			if found {
				ids = append(ids, id)
			}
		}
	}
	natsDir := filepath.Join(dir, NATSDir)
	if err := os.MkdirAll(natsDir, 0o755); err != nil {
		return nil, fmt.Errorf("identities: %w", err)
	}
	if err := os.Chmod(natsDir, 0o755); err != nil { // nats-server may run as another user
		return nil, fmt.Errorf("identities: %w", err)
	}
	auth, err := Render(prefix, ids)
	if err != nil {
		return nil, err
	}
	auth = "# Written by `mcpbus identities --per-role`: the public keys of this deployment's identities.\n" + auth
	if err := secretfile.WriteMode(filepath.Join(natsDir, AuthConfFile), []byte(auth), 0o644); err != nil {
		return nil, err
	}
	for _, role := range []Role{Gateway, Operator} {
		if err := secretfile.WriteMode(filepath.Join(RoleDir(dir, role), AuditKeysFile), []byte(KeysEnv(ids)), 0o644); err != nil {
			return nil, err
		}
	}
	if len(routes) > 0 {
		conf, err := renderRoutes(natsDir, routes)
		if err != nil {
			return nil, err
		}
		if err := secretfile.WriteMode(filepath.Join(natsDir, RoutesConfFile), []byte(conf), 0o600); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// LegacyRunner is the one runner seed, <dir>/runner/runner.nk, that builds
// before one identity per runner instance (036087b, 2026-11-27) made, when
// it is there. Runners of such a deployment connect with it until they are
// upgraded, and a rolling upgrade updates them last, after auth.conf is
// rendered again: without its key there, every runner would be refused and
// every server down until then. ProvisionDeployment keeps it authorized
// while the file exists (it makes none); removing the file and running
// mcpbus identities again retires it.
func LegacyRunner(dir string) (Identity, bool, error) {
	name := string(Runner)
	seed, err := os.ReadFile(filepath.Join(RoleDir(dir, Runner), name+SeedExt))
	if errors.Is(err, fs.ErrNotExist) {
		return Identity{}, false, nil
	}
	if err != nil {
		return Identity{}, false, fmt.Errorf("identities: the single runner seed of an older build: %w", err)
	}
	id, err := identityOf(name, Runner, seed)
	return id, err == nil, err
}

// KeysEnv is ids' public keys as `mcpbus identities` prints them, one
// MCPBUS_<NAME>_NKEY=<key> line each (runner-1 as MCPBUS_RUNNER_1_NKEY):
// the environment nats-server's auth.conf reads, and the keys the audit
// verifiers trust.
func KeysEnv(ids []Identity) string {
	var b strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&b, "MCPBUS_%s_NKEY=%s\n", strings.ToUpper(strings.ReplaceAll(id.Name, "-", "_")), id.Public)
	}
	return b.String()
}

// renderRoutes renders the body of a cluster block's include: the route
// authorization and the routes with its credentials.
func renderRoutes(natsDir string, routes []string) (string, error) {
	pw, err := secretfile.LoadOrCreate(filepath.Join(natsDir, RoutePasswordFile), 256, func() ([]byte, error) {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		return []byte(hex.EncodeToString(b)), nil
	})
	if err != nil {
		return "", fmt.Errorf("route password: %w", err)
	}
	password := strings.TrimSpace(string(pw))
	var b strings.Builder
	b.WriteString("# Written by `mcpbus identities --routes`: the credentials every cluster node requires of a\n")
	b.WriteString("# route (the password is made once, in " + RoutePasswordFile + "), and the routes carrying them.\n")
	fmt.Fprintf(&b, "authorization { user: %q, password: %q }\nroutes: [\n", RouteUser, password)
	for _, r := range routes {
		u, err := url.Parse(strings.TrimSpace(r))
		if err != nil || (u.Scheme != "nats" && u.Scheme != "nats-route") || u.Hostname() == "" || u.Port() == "" || u.User != nil || (u.Path != "" && u.Path != "/") {
			return "", fmt.Errorf("route %q: want nats://host:port, without credentials", r)
		}
		u.User = url.UserPassword(RouteUser, password)
		u.Path = ""
		fmt.Fprintf(&b, "  %q\n", u.String())
	}
	b.WriteString("]\n")
	return b.String(), nil
}

// RunnerNames are the identities of n runner instances: runner-1 … runner-n
// (at least one).
func RunnerNames(n int) []string {
	names := make([]string, max(n, 1))
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", Runner, i+1)
	}
	return names
}
