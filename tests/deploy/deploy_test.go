package deploy

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/types"
	vault "github.com/hashicorp/vault/api"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/mcpbus/mcpbus/libs/access"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/libs/vaulttest"
	"github.com/mcpbus/mcpbus/tests/internal/attack"
)

// What vault-init (deploy/vault/init.sh) creates; TestVaultInit holds the
// script to the same names.
const (
	vaultRole   = "mcpbus-credential"
	vaultPolicy = "mcpbus"
)

const (
	serverName  = "deployecho"
	secretValue = "Bearer deploy-secret-7c41e0a9d2"
)

// The streams the services create (bus.EnsureAssets, the gateway's keys,
// the registry's cache): all at the compose file's MCPBUS_REPLICAS.
var wantStreams = []string{"MCP_EVENTS", "KV_mcp_configs", "KV_mcp_status", "KV_mcp_tools", "KV_mcp_slugs", "KV_mcp_owners", "KV_mcp_apikeys", "KV_mcp_registry_cache",
	"MCP_CHAT", "KV_mcp_chat_profiles", "KV_mcp_chat_approvals", "KV_mcp_chat_turns", "OBJ_mcp_chat_results"}

// TestDeployment runs the deployment docker-compose.yml describes, on this
// machine: the identities job's command, the three NATS nodes from their
// configuration files as nats-server parses them, Vault set up as vault-init
// does, and each service as its own process with its container's environment
// and mounts; then a tool call through the bus and the gateway, and what an
// identity may not do.
func TestDeployment(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node NATS cluster, Vault and five services")
	}
	begin := time.Now()
	p := loadProject(t, []string{"*"}, composeFile)
	v := volumes{root: t.TempDir()}
	logs := t.TempDir()

	ports := testkit.NewPorts(t) // every address of the deployment on this machine, all distinct
	ids := runIdentities(t, p, v)
	cl := startCluster(t, p, v, ids, ports)
	t.Logf("identities and cluster: %s", time.Since(begin).Round(time.Millisecond))

	vlt := startVault(t, p, v)
	t.Logf("vault: %s", time.Since(begin).Round(time.Millisecond))
	sink := newOTLPSink(t)
	echo := newEchoServer(t)

	// Compose service hosts as this machine sees them.
	hosts := map[string]string{"vault:8200": strings.TrimPrefix(vlt.srv.Addr, "http://"), "otel-relay:4318": strings.TrimPrefix(sink.URL, "http://")}
	for i, n := range natsNodes {
		hosts[n+":4222"] = fmt.Sprintf("127.0.0.1:%d", cl.clientPorts[i])
	}
	listen := map[string]map[string]string{} // service → container listen address → this machine's
	var procs []*testkit.Proc
	for _, name := range mcpbusServices {
		s := service(t, p, name)
		environ, addrs := serviceEnv(t, ports, s, v, hosts)
		listen[name] = addrs
		args := mapArgs(t, v, s, s.Command)
		procs = append(procs, testkit.StartProc(t, testkit.ProcOptions{Name: name, Bin: bins[name], Args: args, Env: environ, Dir: logs}))
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, pr := range procs {
				t.Logf("--- %s log (tail) ---\n%s", pr.Name(), pr.Tail(5000))
			}
		}
	})
	for _, pr := range procs {
		pr.WaitLog(t, `"msg":"service ready"`, 45*time.Second)
	}
	t.Logf("services ready: %s", time.Since(begin).Round(time.Millisecond))

	// Each container's healthcheck command, against its process.
	for _, name := range mcpbusServices {
		test := service(t, p, name).HealthCheck.Test
		args := slices.Clone(test[2:]) // CMD mcpbus ...
		for i := range args {
			for from, to := range listen[name] {
				args[i] = strings.Replace(args[i], "127.0.0.1"+from[strings.LastIndex(from, ":"):], to, 1)
			}
		}
		testkit.WaitFor(t, 20*time.Second, func() (bool, string) {
			out, errOut, code := run(t, baseEnv(), "", bins[test[1]], args...)
			return code == 0, fmt.Sprintf("%s healthcheck %v: exit %d %s %s", name, args, code, out, errOut)
		})
	}

	checkReplicas(t, cl)
	id := runFlow(t, p, v, ports, cl, listen["gateway"], echo)
	checkSecretInVault(t, vlt, id)
	checkForbidden(t, v, cl)
	t.Logf("flow and checks done: %s", time.Since(begin).Round(time.Millisecond))

	testkit.StopAll(t, procs, 20*time.Second)
	for _, pr := range procs {
		if strings.Contains(pr.Output(), strings.TrimPrefix(secretValue, "Bearer ")) {
			t.Errorf("the %s log holds the secret", pr.Name())
		}
	}
	// Every service exported its spans to the OTLP endpoint it was given, as itself.
	for _, name := range []string{"runner", "gateway"} {
		want := env(service(t, p, name))["OTEL_SERVICE_NAME"]
		if n := sink.spans(want); n == 0 {
			t.Errorf("no span of %s reached the OTLP endpoint (got %v)", want, sink.services())
		}
	}
	t.Logf("whole test: %s; spans received per service: %v", time.Since(begin).Round(time.Millisecond), sink.services())
}

// mapArgs maps the absolute paths among a container's arguments.
func mapArgs(t *testing.T, v volumes, s types.ServiceConfig, args []string) []string {
	t.Helper()
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		if filepath.IsAbs(a) {
			out[i] = v.hostPath(t, s, a)
		}
	}
	return out
}

// serviceEnv is the environment of s's container on this machine: compose
// hosts replaced by where they are here, paths by their mounts' directories,
// listen addresses (":9464", "0.0.0.0:8080") by free loopback ones, which it
// returns too.
func serviceEnv(t *testing.T, ports *testkit.Ports, s types.ServiceConfig, v volumes, hosts map[string]string) ([]string, map[string]string) {
	t.Helper()
	out := baseEnv()
	addrs := map[string]string{}
	for k, val := range env(s) {
		for from, to := range hosts {
			val = strings.ReplaceAll(val, from, to)
		}
		switch {
		case strings.HasSuffix(k, "_ADDR") && (strings.HasPrefix(val, ":") || strings.HasPrefix(val, "0.0.0.0:")):
			addr := fmt.Sprintf("127.0.0.1:%d", ports.Next())
			addrs[val] = addr
			val = addr
		case filepath.IsAbs(val):
			val = v.hostPath(t, s, val)
		case (k == "MCPBUS_CHILD_UID" || k == "MCPBUS_CHILD_GID") && os.Geteuid() != 0:
			continue // only root (or the image's file capabilities) switches users
		}
		out = append(out, k+"="+val)
	}
	return out, addrs
}

// --- identities ---

// runIdentities runs the identities job's command twice (the second run,
// like every later `docker compose up`, must keep every key) and returns the
// per-role identities it made.
func runIdentities(t *testing.T, p *types.Project, v volumes) map[string]string {
	t.Helper()
	job := service(t, p, "identities")
	if err := os.MkdirAll(filepath.Join(v.root, "volumes"), 0o755); err != nil {
		t.Fatal(err)
	}
	args := mapArgs(t, v, job, job.Command)
	if job.Build == nil || job.Build.Args["SERVICE"] == nil || *job.Build.Args["SERVICE"] != "cli" {
		t.Fatalf("identities: image build %+v, want the cli image (mcpbus)", job.Build)
	}
	first, stderr, code := run(t, baseEnv(), "", bins["mcpbus"], args...)
	if code != 0 {
		t.Fatalf("identities job %v: exit %d: %s", args, code, stderr)
	}
	again, stderr, code := run(t, baseEnv(), "", bins["mcpbus"], args...)
	if code != 0 || again != first {
		t.Fatalf("identities job again: exit %d, %s; output changed: %v", code, stderr, again != first)
	}
	// One line per identity: each role's, and one per runner instance.
	keys := map[string]string{}
	for _, line := range strings.Fields(first) {
		k, val, _ := strings.Cut(line, "=")
		keys[k] = val
	}
	for _, r := range access.ServiceRoles() {
		names := []string{string(r)}
		if r == access.Runner {
			names = access.RunnerNames(3)
		}
		for _, name := range names {
			if !strings.HasPrefix(keys["MCPBUS_"+strings.ToUpper(strings.ReplaceAll(name, "-", "_"))+"_NKEY"], "U") {
				t.Fatalf("identities printed no key of %s: %q", name, first)
			}
		}
	}
	return keys
}

// --- NATS ---

type cluster struct {
	servers     []*server.Server
	clientPorts []int
	superuser   nats.Option
}

func (c *cluster) url(i int) string { return fmt.Sprintf("nats://127.0.0.1:%d", c.clientPorts[i]) }

// startCluster starts the three nodes from their compose services: the
// container's /etc/nats assembled from its mounts, parsed by nats-server,
// checked, then run with ports, store and routes moved to this machine.
func startCluster(t *testing.T, p *types.Project, v volumes, keys map[string]string, ports *testkit.Ports) *cluster {
	t.Helper()
	n := len(natsNodes)
	c := &cluster{}
	var clusterPorts, httpPorts []int
	for range n {
		c.clientPorts = append(c.clientPorts, ports.Next())
		clusterPorts = append(clusterPorts, ports.Next())
		httpPorts = append(httpPorts, ports.Next())
	}
	super, superOpt := testkit.Superuser(t)
	c.superuser = superOpt
	var healthURLs []string
	for i, name := range natsNodes {
		s := service(t, p, name)
		if !slices.Equal(s.Command, []string{"--config", "/etc/nats/nats.conf"}) {
			t.Fatalf("%s: command %q", name, s.Command)
		}
		etc := assemble(t, v, s, "/etc/nats")
		opts, err := server.ProcessConfigFile(filepath.Join(etc, "nats.conf"))
		if err != nil {
			t.Fatalf("%s: nats-server refuses its configuration: %v", name, err)
		}
		checkNodeOptions(t, name, opts, keys)

		// The same options, on this machine.
		opts.Host, opts.Port = "127.0.0.1", c.clientPorts[i]
		opts.HTTPPort = httpPorts[i]
		opts.Cluster.Host, opts.Cluster.Port = "127.0.0.1", clusterPorts[i]
		for _, r := range opts.Routes {
			j := slices.Index(natsNodes, r.Hostname())
			if j < 0 {
				t.Fatalf("%s: route to %s, not a node", name, r.Redacted())
			}
			r.Host = fmt.Sprintf("127.0.0.1:%d", clusterPorts[j])
		}
		opts.StoreDir = v.hostPath(t, s, opts.StoreDir)
		opts.Nkeys = append(opts.Nkeys, super)
		opts.NoSigs = true
		ns, err := server.NewServer(opts)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		go ns.Start()
		t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
		c.servers = append(c.servers, ns)
		for _, a := range s.HealthCheck.Test {
			if strings.HasPrefix(a, "http://127.0.0.1:8222/") {
				healthURLs = append(healthURLs, strings.Replace(a, ":8222/", fmt.Sprintf(":%d/", httpPorts[i]), 1))
			}
		}
	}
	// The nodes' healthchecks pass, and JetStream has its meta leader.
	for i, u := range healthURLs {
		testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
			resp, err := http.Get(u)
			if err != nil {
				return false, err.Error()
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, fmt.Sprintf("%s healthcheck %s: %d %s", natsNodes[i], u, resp.StatusCode, body)
		})
	}
	nc := c.connect(t, 0, c.superuser)
	js, _ := jetstream.New(nc)
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		_, err := js.AccountInfo(ctx)
		return err == nil, fmt.Sprintf("JetStream: %v", err)
	})
	for i, ns := range c.servers {
		if !ns.JetStreamIsClustered() || ns.NumRoutes() == 0 {
			t.Fatalf("%s: clustered %v, routes %d", natsNodes[i], ns.JetStreamIsClustered(), ns.NumRoutes())
		}
	}
	checkRogueRoute(t, clusterPorts[0])
	return c
}

// assemble makes a directory standing for dir of s's container: each mount
// under it a link to its source on this machine.
func assemble(t *testing.T, v volumes, s types.ServiceConfig, dir string) string {
	t.Helper()
	root := filepath.Join(v.root, "rootfs", s.Name)
	for _, m := range s.Volumes {
		if !strings.HasPrefix(m.Target, dir+"/") {
			continue
		}
		link := filepath.Join(root, m.Target)
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(v.hostPath(t, s, m.Target), link); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(root, dir)
}

// checkNodeOptions: what the node's files say, as nats-server read them.
func checkNodeOptions(t *testing.T, name string, o *server.Options, keys map[string]string) {
	t.Helper()
	if o.ServerName != name || o.Cluster.Name != "mcpbus" || !o.JetStream || o.StoreDir != "/data/jetstream" ||
		o.MaxPayload != 8*1024*1024 || o.Port != 4222 || o.Cluster.Port != 6222 || o.HTTPHost != "127.0.0.1" || o.HTTPPort != 8222 {
		t.Errorf("%s: server_name %q cluster %q jetstream %v store %q max_payload %d port %d cluster port %d monitoring %s:%d",
			name, o.ServerName, o.Cluster.Name, o.JetStream, o.StoreDir, o.MaxPayload, o.Port, o.Cluster.Port, o.HTTPHost, o.HTTPPort)
	}
	// JetStream bounded below the container's memory and the volume's size.
	if o.JetStreamMaxMemory != 256<<20 || o.JetStreamMaxStore != 20<<30 {
		t.Errorf("%s: max_memory_store %d, max_file_store %d: want 256MB and 20GB (the assets reserve 18 GiB)", name, o.JetStreamMaxMemory, o.JetStreamMaxStore)
	}
	if o.Cluster.Username != access.RouteUser || len(o.Cluster.Password) < 32 {
		t.Errorf("%s: routes need no credentials (%q)", name, o.Cluster.Username)
	}
	var hosts []string
	for _, r := range o.Routes {
		pw, _ := r.User.Password()
		if r.User.Username() != o.Cluster.Username || pw != o.Cluster.Password {
			t.Errorf("%s: route %s without the cluster's credentials", name, r.Redacted())
		}
		hosts = append(hosts, r.Host)
	}
	if !slices.Equal(hosts, []string{"nats-1:6222", "nats-2:6222", "nats-3:6222"}) {
		t.Errorf("%s: routes %v", name, hosts)
	}
	if len(o.Users) != 0 || o.NoAuthUser != "" || len(o.Nkeys) != len(keys) {
		t.Errorf("%s: %d users, %d nkey users, no-auth user %q: want exactly the %d identities", name, len(o.Users), len(o.Nkeys), o.NoAuthUser, len(keys))
	}
	for _, u := range o.Nkeys {
		if !slices.Contains(slices.Collect(mapValues(keys)), u.Nkey) {
			t.Errorf("%s: unknown user %s", name, u.Nkey)
		}
	}
}

func mapValues[K comparable, V any](m map[K]V) func(func(V) bool) {
	return func(yield func(V) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}

// checkRogueRoute: a route without the cluster's credentials (an MCP
// server on the compose network trying to join the cluster and see every
// message) is refused.
func checkRogueRoute(t *testing.T, port int) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(conn)
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "INFO ") {
		t.Fatalf("route port: %q %v", line, err)
	}
	fmt.Fprintf(conn, "CONNECT {\"verbose\":false,\"pedantic\":false,\"tls_required\":false,\"name\":\"rogue\",\"cluster\":\"mcpbus\"}\r\nPING\r\n")
	var got []string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			break
		}
		got = append(got, strings.TrimSpace(line))
	}
	if !slices.Contains(got, "-ERR 'Authorization Violation'") {
		t.Errorf("a route without credentials got %q, want an authorization violation", got)
	}
}

func (c *cluster) connect(t *testing.T, i int, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(c.url(i), append([]nats.Option{nats.Timeout(5 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// checkReplicas: every stream and bucket the services made has three
// replicas, one per node.
func checkReplicas(t *testing.T, c *cluster) {
	t.Helper()
	js, err := jetstream.New(c.connect(t, 1, c.superuser))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var names []string
	for name := range js.StreamNames(ctx).Name() {
		names = append(names, name)
	}
	for _, want := range wantStreams {
		if !slices.Contains(names, want) {
			t.Errorf("stream %s missing (streams %v)", want, names)
		}
	}
	for _, name := range names {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info := st.CachedInfo()
		if info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
			t.Errorf("stream %s: %d replicas configured, cluster %+v", name, info.Config.Replicas, info.Cluster)
		}
	}
}

// --- Vault ---

type vaultEnv struct {
	srv  *vaulttest.Server
	root *vault.Client
}

// startVault runs a real Vault and sets it up as deploy/vault/init.sh does
// (policy, AppRole role), writing the role id and secret id where the
// credential container reads them.
func startVault(t *testing.T, p *types.Project, v volumes) *vaultEnv {
	t.Helper()
	srv := vaulttest.Start(t)
	cfg := vault.DefaultConfig()
	cfg.Address = srv.Addr
	root, err := vault.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	root.SetToken(srv.Token)
	policy, err := os.ReadFile(filepath.Join(repoRoot(), "deploy", "vault", "mcpbus-policy.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	if err := root.Sys().PutPolicy(vaultPolicy, string(policy)); err != nil {
		t.Fatal(err)
	}
	if err := root.Sys().EnableAuthWithOptions("approle", &vault.EnableAuthOptions{Type: "approle"}); err != nil {
		t.Fatal(err)
	}
	if _, err := root.Logical().Write("auth/approle/role/"+vaultRole, map[string]any{
		"token_policies": vaultPolicy, "token_ttl": "1h", "token_max_ttl": "24h", "secret_id_ttl": 0, "secret_id_num_uses": 0,
	}); err != nil {
		t.Fatal(err)
	}
	rid, err := root.Logical().Read("auth/approle/role/" + vaultRole + "/role-id")
	if err != nil {
		t.Fatal(err)
	}
	sid, err := root.Logical().Write("auth/approle/role/"+vaultRole+"/secret-id", nil)
	if err != nil {
		t.Fatal(err)
	}
	cred := service(t, p, "credential")
	e := env(cred)
	for k, val := range map[string]any{"MCPBUS_VAULT_ROLE_ID_FILE": rid.Data["role_id"], "MCPBUS_VAULT_SECRET_ID_FILE": sid.Data["secret_id"]} {
		path := v.hostPath(t, cred, e[k])
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(val.(string)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return &vaultEnv{srv: srv, root: root}
}

// checkSecretInVault: the server's secret went to Vault, under the path
// the policy grants.
func checkSecretInVault(t *testing.T, v *vaultEnv, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	sec, err := v.root.KVv2("secret").Get(ctx, "mcpbus/server/"+id) // records are keyed <owner kind>/<id>
	if err != nil {
		t.Fatalf("the secret of %s is not in Vault: %v", id, err)
	}
	raw, _ := json.Marshal(sec.Data)
	if !bytes.Contains(raw, []byte(strings.TrimPrefix(secretValue, "Bearer "))) {
		t.Errorf("Vault's record of %s does not hold the secret", id)
	}
}

// --- the flow ---

// echoServer is a Streamable HTTP MCP server that wants the secret header.
type echoServer struct {
	*httptest.Server
	mu           sync.Mutex
	authorized   int
	unauthorized int
}

func newEchoServer(t *testing.T) *echoServer {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "deploy-echo", Version: "1"}, nil)
	type in struct {
		Message string `json:"message"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "echo", Description: "says the message back"}, func(_ context.Context, _ *mcp.CallToolRequest, a in) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: a.Message}}}, nil, nil
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	e := &echoServer{}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		ok := r.Header.Get("Authorization") == secretValue
		if ok {
			e.authorized++
		} else {
			e.unauthorized++
		}
		e.mu.Unlock()
		if !ok {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(e.Close)
	return e
}

// runFlow adds the echo server with its secret through the CLI (as the cli
// service runs it), calls it over the CLI, plain NATS and the gateway, and
// returns its config id.
func runFlow(t *testing.T, p *types.Project, v volumes, ports *testkit.Ports, c *cluster, gateway map[string]string, echo *echoServer) string {
	t.Helper()
	cliSvc := service(t, p, "cli")
	hosts := map[string]string{}
	for i, n := range natsNodes {
		hosts[n+":4222"] = fmt.Sprintf("127.0.0.1:%d", c.clientPorts[i])
	}
	cliEnv, _ := serviceEnv(t, ports, cliSvc, v, hosts)
	mcpbus := func(stdin string, args ...string) string {
		t.Helper()
		out, errOut, code := run(t, cliEnv, stdin, bins["mcpbus"], args...)
		if code != 0 {
			t.Fatalf("mcpbus %v: exit %d: %s %s", args, code, out, errOut)
		}
		return out
	}
	out := mcpbus(secretValue+"\n", "servers", "add", serverName, "--url", echo.URL+"/mcp", "--secret-header", "Authorization", "--json")
	var cfg struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(out), &cfg); err != nil || cfg.ID == "" {
		t.Fatalf("servers add: %v: %s", err, out)
	}
	if strings.Contains(out, strings.TrimPrefix(secretValue, "Bearer ")) {
		t.Errorf("servers add printed the secret")
	}
	mcpbus("", "servers", "enable", serverName, "--json")
	if got := strings.TrimSpace(mcpbus("", "call", serverName+".echo", `{"message":"hello deploy"}`)); got != "hello deploy" {
		t.Errorf("mcpbus call: %q", got)
	}

	// Plain NATS, as the operator.
	seed := env(cliSvc)["MCPBUS_NATS_NKEY"]
	opt, err := nats.NkeyOptionFromSeed(v.hostPath(t, cliSvc, seed))
	if err != nil {
		t.Fatal(err)
	}
	nc := c.connect(t, 2, opt, nats.CustomInboxPrefix(access.Inbox("operator")))
	msg, err := nc.Request("mcp.v1.call."+serverName+".echo", []byte(`{"message":"plain nats"}`), 20*time.Second)
	if err != nil || !strings.Contains(string(msg.Data), "plain nats") {
		t.Errorf("plain NATS call: %v %s", err, msgData(msg))
	}

	// The gateway, with the admin key it wrote to its volume.
	gw := service(t, p, "gateway")
	key, err := os.ReadFile(v.hostPath(t, gw, "/var/lib/mcpbus/admin.key"))
	if err != nil {
		t.Fatalf("the gateway's admin key: %v", err)
	}
	addr := gateway[env(gw)["MCPBUS_HTTP_ADDR"]]
	body := `{"tool_name":"` + serverName + `__echo","params":{"message":"via gateway"}}`
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+addr+"/mcp/invoke", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(key)))
	var inv struct {
		Success bool            `json:"success"`
		Result  json.RawMessage `json:"result"`
	}
	testkit.WaitFor(t, 20*time.Second, func() (bool, string) {
		resp, err := http.DefaultClient.Do(req.Clone(t.Context()))
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		req.Body = io.NopCloser(strings.NewReader(body))
		raw, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(raw, &inv)
		return resp.StatusCode == http.StatusOK && inv.Success && strings.Contains(string(inv.Result), "via gateway"),
			fmt.Sprintf("POST /mcp/invoke: %d %s", resp.StatusCode, raw)
	})
	echo.mu.Lock()
	defer echo.mu.Unlock()
	if echo.authorized == 0 || echo.unauthorized != 0 {
		t.Errorf("the MCP server got %d requests with the secret header and %d without", echo.authorized, echo.unauthorized)
	}
	return cfg.ID
}

func msgData(m *nats.Msg) string {
	if m == nil {
		return ""
	}
	return string(m.Data)
}

// --- what identities may not do ---

// checkForbidden: NATS refuses a connection without credentials, and each
// identity what its role may not do.
func checkForbidden(t *testing.T, v volumes, c *cluster) {
	t.Helper()
	if nc, err := nats.Connect(c.url(0), nats.NoReconnect(), nats.Timeout(2*time.Second)); err == nil {
		nc.Close()
		t.Error("a connection without credentials was accepted")
	}
	seedOf := func(role access.Role) string {
		name := string(role)
		if role == access.Runner {
			name = access.RunnerNames(1)[0] // one of the runner instances' identities
		}
		return filepath.Join(access.RoleDir(v.dir(identitiesVol), role), name+access.SeedExt)
	}
	cases := []struct {
		role    access.Role
		what    string
		subject string
		act     func(nc *nats.Conn) error
	}{
		{access.Registry, "resolve a server's credentials", "mcp.v1.cred.resolve", func(nc *nats.Conn) error {
			return nc.Publish("mcp.v1.cred.resolve", []byte(`{}`))
		}},
		{access.Chat, "read the configs bucket", "$JS.API.DIRECT.GET.KV_mcp_configs.$KV.mcp_configs." + serverName, func(nc *nats.Conn) error {
			return nc.PublishRequest("$JS.API.DIRECT.GET.KV_mcp_configs.$KV.mcp_configs."+serverName, nc.NewRespInbox(), nil)
		}},
		{access.Chat, "read the keys bucket's stream", "$JS.API.STREAM.INFO.KV_mcp_apikeys", func(nc *nats.Conn) error {
			return nc.PublishRequest("$JS.API.STREAM.INFO.KV_mcp_apikeys", nc.NewRespInbox(), nil)
		}},
		{access.Gateway, "write a config", "$KV.mcp_configs." + serverName, func(nc *nats.Conn) error {
			return nc.Publish("$KV.mcp_configs."+serverName, []byte(`{}`))
		}},
		{access.Runner, "read the gateway's replies", "_I.gateway.>", func(nc *nats.Conn) error {
			_, err := nc.SubscribeSync("_I.gateway.>")
			return err
		}},
	}
	for _, tc := range cases {
		opt, err := nats.NkeyOptionFromSeed(seedOf(tc.role))
		if err != nil {
			t.Fatal(err)
		}
		violations := make(chan string, 8)
		inbox := access.Inbox(strings.TrimSuffix(filepath.Base(seedOf(tc.role)), access.SeedExt))
		nc, err := nats.Connect(c.url(1), opt, nats.CustomInboxPrefix(inbox), nats.NoReconnect(),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err.Error() }))
		if err != nil {
			t.Fatalf("%s identity: %v", tc.role, err)
		}
		if err := tc.act(nc); err != nil {
			t.Fatal(err)
		}
		_ = nc.Flush()
		select {
		case v := <-violations:
			if !strings.Contains(v, "Permissions Violation") || !strings.Contains(v, `"`+tc.subject+`"`) {
				t.Errorf("%s may %s? %s", tc.role, tc.what, v)
			}
		case <-time.After(3 * time.Second):
			t.Errorf("%s may %s (%s): no permissions violation", tc.role, tc.what, tc.subject)
		}
		nc.Close()
	}
	// The runners drop requests whose replies are aimed at their own buckets.
	opt, err := nats.NkeyOptionFromSeed(seedOf(access.Gateway))
	if err != nil {
		t.Fatal(err)
	}
	gnc, err := nats.Connect(c.url(1), opt, nats.CustomInboxPrefix(access.Inbox(string(access.Gateway))), nats.NoReconnect())
	if err != nil {
		t.Fatal(err)
	}
	defer gnc.Close()
	attack.RepliesAimedAtBuckets(t, gnc, "compose layout")
}

// --- OTLP ---

// otlpSink stands in for Jaeger's OTLP/HTTP receiver: it counts the spans it
// gets per service.name.
type otlpSink struct {
	*httptest.Server
	mu    sync.Mutex
	count map[string]int
}

func newOTLPSink(t *testing.T) *otlpSink {
	t.Helper()
	s := &otlpSink{count: map[string]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" {
			http.NotFound(w, r)
			return
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		data, _ := io.ReadAll(body)
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(data, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		for _, rs := range req.ResourceSpans {
			name := ""
			for _, a := range rs.GetResource().GetAttributes() {
				if a.Key == "service.name" {
					name = a.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				s.count[name] += len(ss.Spans)
			}
		}
		s.mu.Unlock()
		resp, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(resp)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *otlpSink) spans(service string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count[service]
}

func (s *otlpSink) services() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, v := range s.count {
		out[k] = v
	}
	return out
}
