package access

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// TestProvisionDeployment: one directory per role, kept across runs, and the
// files nats-server includes load into exactly the table's users and the
// cluster's route credentials.
func TestProvisionDeployment(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ids")
	routes := []string{"nats://nats-1:6222", "nats://nats-2:6222", "nats://nats-3:6222"}
	first, err := ProvisionDeployment(dir, "mcp.v1", routes, 3)
	if err != nil {
		t.Fatal(err)
	}
	password, err := os.ReadFile(filepath.Join(dir, NATSDir, RoutePasswordFile))
	if err != nil {
		t.Fatal(err)
	}
	again, err := ProvisionDeployment(dir, "mcp.v1", routes, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != len(ServiceRoles())+2 || !slices.EqualFunc(first, again, func(a, b Identity) bool { return a.Public == b.Public && a.Role == b.Role }) {
		t.Fatalf("a second run changed the identities: %v / %v", first, again)
	}
	if p2, _ := os.ReadFile(filepath.Join(dir, NATSDir, RoutePasswordFile)); string(p2) != string(password) || len(password) < 64 {
		t.Fatalf("route password %q then %q", password, p2)
	}
	mode := func(p string) os.FileMode {
		t.Helper()
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return st.Mode().Perm()
	}
	for _, id := range first {
		rd := RoleDir(dir, id.Role)
		if m := mode(rd); m != 0o700 {
			t.Errorf("%s: mode %04o, want 0700", rd, m)
		}
		var names []string
		entries, _ := os.ReadDir(rd)
		for _, e := range entries {
			names = append(names, e.Name())
		}
		want := []string{string(id.Role) + SeedExt}
		if id.Role == Runner { // one identity per runner instance
			want = []string{"runner-1.nk", "runner-2.nk", "runner-3.nk"}
		}
		if id.Role == Gateway || id.Role == Operator { // those who verify the audit chains
			want = []string{AuditKeysFile, string(id.Role) + SeedExt}
			keys, err := os.ReadFile(filepath.Join(rd, AuditKeysFile))
			if err != nil || string(keys) != KeysEnv(first) || mode(filepath.Join(rd, AuditKeysFile)) != 0o644 {
				t.Errorf("%s/%s: %q, %v", rd, AuditKeysFile, keys, err)
			}
			for _, other := range first {
				if !strings.Contains(string(keys), "="+other.Public+"\n") {
					t.Errorf("%s/%s lacks %s's key", rd, AuditKeysFile, other.Name)
				}
			}
		}
		if !slices.Equal(names, want) {
			t.Errorf("%s holds %v, want only %v", rd, names, want)
		}
		if m := mode(filepath.Join(rd, id.Name+SeedExt)); m != 0o600 {
			t.Errorf("%s seed: mode %04o", id.Name, m)
		}
	}
	for f, want := range map[string]os.FileMode{NATSDir: 0o755, NATSDir + "/" + AuthConfFile: 0o644, NATSDir + "/" + RoutesConfFile: 0o600, NATSDir + "/" + RoutePasswordFile: 0o600} {
		if m := mode(filepath.Join(dir, f)); m != want {
			t.Errorf("%s: mode %04o, want %04o", f, m, want)
		}
	}
	// Nothing secret in the public part but the route password file and the routes.
	for _, id := range first {
		for _, f := range []string{AuthConfFile, RoutesConfFile} {
			data, _ := os.ReadFile(filepath.Join(dir, NATSDir, f))
			if strings.Contains(string(data), string(id.Seed)) {
				t.Errorf("%s holds %s's seed", f, id.Role)
			}
		}
	}

	// A node configuration as deploy/nats/cluster has it.
	conf := filepath.Join(dir, "node.conf")
	if err := os.WriteFile(conf, []byte("port: -1\ncluster {\n  name: mcpbus\n  port: -1\n  include \"nats/routes.conf\"\n}\ninclude \"nats/auth.conf\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string]Identity{}
	for _, id := range first {
		byKey[id.Public] = id
	}
	if len(opts.Nkeys) != len(first) {
		t.Fatalf("%d users, want %d", len(opts.Nkeys), len(first))
	}
	for _, u := range opts.Nkeys {
		id, ok := byKey[u.Nkey]
		if !ok {
			t.Fatalf("unknown user %s", u.Nkey)
		}
		want, _ := ForIdentity(id, "mcp.v1")
		if !slices.Equal(u.Permissions.Publish.Allow, want.Publish) || !slices.Equal(u.Permissions.Subscribe.Allow, want.Subscribe) {
			t.Errorf("%s: loaded permissions differ from the table", id.Role)
		}
	}
	pw := strings.TrimSpace(string(password))
	if opts.Cluster.Username != RouteUser || opts.Cluster.Password != pw {
		t.Errorf("cluster authorization %q/%q", opts.Cluster.Username, opts.Cluster.Password)
	}
	if len(opts.Routes) != len(routes) {
		t.Fatalf("routes %v", opts.Routes)
	}
	for i, r := range opts.Routes {
		p, _ := r.User.Password()
		if r.User.Username() != RouteUser || p != pw || r.Host != strings.TrimPrefix(routes[i], "nats://") {
			t.Errorf("route %d: %s", i, r.Redacted())
		}
	}

	// Without --routes, no routes.conf is needed; bad routes are refused.
	if _, err := ProvisionDeployment(filepath.Join(t.TempDir(), "plain"), "mcp.v1", nil, 1); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"nats-1:6222", "http://nats-1:6222", "nats://u:p@nats-1:6222", "nats://nats-1", "nats://nats-1:6222/x"} {
		if _, err := ProvisionDeployment(filepath.Join(t.TempDir(), "bad"), "mcp.v1", []string{bad}, 1); err == nil {
			t.Errorf("route %q accepted", bad)
		}
	}
}

// TestIncludedVariablesStayInTheirFile is why auth.conf is written with the
// keys in it: nats-server parses each included file on its own, so a
// variable that one include defines is not seen by another.
func TestIncludedVariablesStayInTheirFile(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"vars.conf": "MCPBUS_RUNNER_NKEY: \"UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4\"\n",
		"auth.conf": "authorization { users = [ { nkey: $MCPBUS_RUNNER_NKEY } ] }\n",
		"main.conf": "port: -1\ninclude \"vars.conf\"\ninclude \"auth.conf\"\n",
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(EnvNKey(Runner), "") // restored after the test
	_ = os.Unsetenv(EnvNKey(Runner))
	if _, err := server.ProcessConfigFile(filepath.Join(dir, "main.conf")); err == nil || !strings.Contains(err.Error(), "MCPBUS_RUNNER_NKEY") {
		t.Fatalf("a variable of one include resolved in another (%v): auth.conf could use variables", err)
	}
}

// TestProvisionDeploymentKeepsAnOlderBuildsRunnerSeed: a deployment whose
// identities an older build made (before 036087b) has one runner seed,
// runner/runner.nk, which its runners use until a rolling upgrade reaches
// them, after auth.conf is rendered again. The new auth.conf still
// authorizes that key as a runner with its inbox _I.runner (as the file
// name gives it) until the file is removed.
func TestProvisionDeploymentKeepsAnOlderBuildsRunnerSeed(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ids")
	// As `mcpbus identities --per-role` of c670ae3 (2026-11-24) left it.
	old, err := OpenStore(RoleDir(dir, Runner))
	if err != nil {
		t.Fatal(err)
	}
	legacy, err := old.Ensure(string(Runner), Runner)
	if err != nil {
		t.Fatal(err)
	}
	users := func() map[string]*server.NkeyUser {
		t.Helper()
		ids, err := ProvisionDeployment(dir, "mcp.v1", nil, 3)
		if err != nil {
			t.Fatal(err)
		}
		conf := filepath.Join(dir, "node.conf")
		if err := os.WriteFile(conf, []byte("port: -1\ninclude \"nats/auth.conf\"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		opts, err := server.ProcessConfigFile(conf)
		if err != nil {
			t.Fatal(err)
		}
		byKey := map[string]*server.NkeyUser{}
		for _, u := range opts.Nkeys {
			byKey[u.Nkey] = u
		}
		keys, err := os.ReadFile(filepath.Join(RoleDir(dir, Operator), AuditKeysFile))
		if err != nil || string(keys) != KeysEnv(ids) {
			t.Fatalf("audit keys %q, %v", keys, err)
		}
		return byKey
	}
	u, ok := users()[legacy.Public]
	if !ok {
		t.Fatalf("auth.conf no longer authorizes the runner seed of the older build (%s)", legacy.Public)
	}
	want, err := ForIdentity(legacy, "mcp.v1")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(u.Permissions.Publish.Allow, want.Publish) || !slices.Equal(u.Permissions.Subscribe.Allow, want.Subscribe) ||
		!slices.Contains(u.Permissions.Subscribe.Allow, "_I.runner.>") {
		t.Errorf("the older runner seed's permissions: publish %v subscribe %v", u.Permissions.Publish.Allow, u.Permissions.Subscribe.Allow)
	}
	if err := os.Remove(old.SeedFile(string(Runner))); err != nil {
		t.Fatal(err)
	}
	if _, ok := users()[legacy.Public]; ok {
		t.Error("the older runner seed is still authorized after its file was removed")
	}
}
