package split

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/audit"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/registry/registrytest"
	"github.com/mcpbus/mcpbus/tests/internal/attack"
	"github.com/mcpbus/mcpbus/tests/internal/clitest"
)

// Binaries built once by TestMain.
var (
	testServer string // the go-sdk test MCP server (libs/testmcp)
	mcpbusBin  string // tools/mcpbus
	natsServer string // a real github.com/nats-io/nats-server/v2
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run()) // the test skips itself: build nothing
	}
	// nats-server/v2 is in the workspace's build list (the tests module
	// requires it), so it builds from the repository's top like mcpbus.
	testkit.Main(m, &testServer,
		testkit.WithBinary(&mcpbusBin, testkit.BuildCommand("mcpbus", "./tools/mcpbus")),
		testkit.WithBinary(&natsServer, testkit.BuildCommand("nats-server", "github.com/nats-io/nats-server/v2")))
}

// What the flow uses; the same in both deployments, so results compare equal.
const (
	serverName  = "split-echo"
	secretEnv   = "SPLIT_TOKEN"
	secretValue = "split-secret-4b7e91c2d0"
	smitheryKey = "smk-split-e2e-5f3a6d"
	searchQuery = "server"
)

// TestSplitDeploymentMatchesUp runs one flow against every service as its own
// process on a real nats-server, then against `mcpbus up`, and checks that
// both give the same observable results.
func TestSplitDeploymentMatchesUp(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server and six mcpbus processes")
	}
	begin := time.Now()
	si := startStandIns(t)
	results := map[string]flowResult{}
	for _, kind := range []string{"split", "up"} {
		t.Run(kind, func(t *testing.T) {
			start := time.Now()
			var d *deployment
			if kind == "split" {
				d = startSplit(t, si)
			} else {
				d = startUp(t, si)
			}
			up := time.Now()
			checkHostile(t, d)
			res := runFlow(t, d)
			flowDone := time.Now()
			d.stop(t)
			d.checkNoSecretsInLogs(t)
			t.Logf("%s: start %s, flow %s, stop %s", kind, up.Sub(start).Round(time.Millisecond),
				flowDone.Sub(up).Round(time.Millisecond), time.Since(flowDone).Round(time.Millisecond))
			if !t.Failed() {
				results[kind] = res
			}
		})
	}
	split, okSplit := results["split"]
	up, okUp := results["up"]
	if !okSplit || !okUp {
		t.Fatalf("a deployment failed; nothing to compare")
	}
	if !reflect.DeepEqual(split, up) {
		a, _ := json.MarshalIndent(split, "", "  ")
		b, _ := json.MarshalIndent(up, "", "  ")
		t.Errorf("the split deployment and mcpbus up differ:\nsplit: %s\nup:    %s", a, b)
	}
	if testing.Verbose() {
		a, _ := json.MarshalIndent(split, "", "  ")
		t.Logf("both deployments observed:\n%s", a)
	}
	t.Logf("whole test: %s", time.Since(begin).Round(time.Millisecond))
}

// flowResult is what the flow observes; the split deployment and `mcpbus up`
// must observe the same.
type flowResult struct {
	// servers add --secret-env
	AddEnabled   bool
	AddAuthType  string
	AddSecretEnv model.EnvVar
	// servers enable, then status
	Enabled     bool
	State       string
	StatusTools []string
	// mcpbus call and a plain NATS request
	CLIEcho     string
	CLISecretOK bool // the env tool gave the child's SPLIT_TOKEN: the secret
	NATSEcho    string
	// cred describe
	CredEnv []string
	// the gateway: /mcp with the go-sdk client, /mcp/invoke over plain HTTP
	MCPTools          []string
	MCPEcho           string
	MCPSecretSHA256   string
	InvokeStatus      int
	InvokeSuccess     bool
	InvokeSecretOK    bool
	InvokeNoKeyStatus int
	// cred set-registry-key smithery, then search
	SearchResults     []string // name [sources]
	SearchWarnings    int
	SmitheryAuthOK    bool // every request to the Smithery stand-in carried the stored key as a bearer token
	OfficialRequested bool
	// servers disable
	DisabledEnabled  bool
	DisabledState    string
	ChildGone        bool
	MCPToolsAfterOff []string
	// servers rm
	Removed            string
	ConfigsAfterRemove int
	StatusAfterRemove  int
	DescribeAfterRm    string // the error code
	// audit verify: the roles whose chains verified (calls, config
	// changes, credential resolves), every link and signature holding
	AuditRoles []string
}

// runFlow drives one deployment through the CLI, plain NATS and the gateway.
func runFlow(t *testing.T, d *deployment) flowResult {
	t.Helper()
	var res flowResult
	must := func(r clitest.Result, what string) clitest.Result {
		t.Helper()
		if r.Code != 0 {
			t.Fatalf("%s: %s", what, r)
		}
		if strings.Contains(r.Stdout+r.Stderr, secretValue) && what != "call env" {
			t.Errorf("%s printed the secret: %s", what, r)
		}
		return r
	}
	decode := func(r clitest.Result, v any) {
		t.Helper()
		if err := json.Unmarshal([]byte(r.Stdout), v); err != nil {
			t.Fatalf("%v: output is not the expected JSON: %v: %s", r.Args, err, r)
		}
	}

	// Add the test server with a secret read from stdin, then enable it.
	r := must(d.cli(t, secretValue+"\n", "servers", "add", serverName, "--binary", testServer,
		"--arg", "-name", "--arg", serverName, "--secret-env", secretEnv, "--json"), "servers add")
	var added model.McpConfig
	decode(r, &added)
	res.AddEnabled, res.AddAuthType, res.AddSecretEnv = added.Enabled, added.AuthType, added.EnvVars[secretEnv]
	if added.EnvVars[secretEnv].SecretRef != secretEnv || !added.EnvVars[secretEnv].IsSecret {
		t.Errorf("servers add: %s is not a secret reference: %+v", secretEnv, added.EnvVars)
	}
	r = must(d.cli(t, "", "servers", "enable", serverName, "--json"), "servers enable")
	var enabled model.McpConfig
	decode(r, &enabled)
	res.Enabled = enabled.Enabled
	st := d.waitState(t, model.StateRunning, 30*time.Second)
	res.State, res.StatusTools = st.State, slices.Sorted(slices.Values(st.Tools))

	// Calls over NATS: the CLI, then a plain nats.go request.
	r = must(d.cli(t, "", "call", serverName+".echo", `{"message":"hello split"}`), "call echo")
	res.CLIEcho = strings.TrimSpace(r.Stdout)
	// Its SHA-256, not the value: a tool result carrying a known secret is
	// redacted (secret_scan.results defaults to redact).
	secretSum := sha256.Sum256([]byte(secretValue))
	r = must(d.cli(t, "", "call", serverName+".env_sha256", `{"name":"`+secretEnv+`"}`), "call env_sha256")
	res.CLISecretOK = strings.TrimSpace(r.Stdout) == hex.EncodeToString(secretSum[:])
	if !res.CLISecretOK {
		t.Errorf("the child's %s is not the stored secret: %s", secretEnv, r)
	}
	res.NATSEcho = d.natsCall(t, "echo", `{"message":"plain nats"}`)

	// The credential service knows the name, never shows the value.
	r = must(d.cli(t, "", "cred", "describe", serverName, "--json"), "cred describe")
	var desc model.CredDescription
	decode(r, &desc)
	res.CredEnv = desc.Env
	if !desc.Has(secretEnv) {
		t.Errorf("cred describe does not list %s: %s", secretEnv, r)
	}

	// The gateway: /mcp with the go-sdk client and the admin key.
	admin := d.adminKey(t)
	s := d.connectMCP(t, admin)
	tools := waitMCPTools(t, s, 20*time.Second, "lists "+serverName+"__echo", func(names []string) bool {
		return slices.Contains(names, serverName+"__echo")
	})
	res.MCPTools = tools
	res.MCPEcho = mcpCallText(t, s, serverName+"__echo", map[string]any{"message": "hello gateway"})
	res.MCPSecretSHA256 = mcpCallText(t, s, serverName+"__env_sha256", map[string]any{"name": secretEnv})
	if sum := sha256.Sum256([]byte(secretValue)); res.MCPSecretSHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("env_sha256 through /mcp: %q, want the SHA-256 of the stored secret", res.MCPSecretSHA256)
	}

	// /mcp/invoke over plain HTTP, with the admin key and without a key.
	body := `{"tool_name":"` + serverName + `__env_sha256","params":{"name":"` + secretEnv + `"}}`
	status, raw := d.httpPost(t, "/mcp/invoke", admin, body)
	var inv struct {
		Success bool            `json:"success"`
		Result  json.RawMessage `json:"result"`
		Error   string          `json:"error"`
	}
	if err := json.Unmarshal(raw, &inv); err != nil {
		t.Fatalf("POST /mcp/invoke: %d, not JSON: %v: %s", status, err, raw)
	}
	res.InvokeStatus, res.InvokeSuccess = status, inv.Success
	res.InvokeSecretOK = resultText(inv.Result) == hex.EncodeToString(secretSum[:])
	if status != http.StatusOK || !inv.Success || !res.InvokeSecretOK {
		t.Errorf("POST /mcp/invoke %s__env_sha256: %d %s", serverName, status, raw)
	}
	res.InvokeNoKeyStatus, raw = d.httpPost(t, "/mcp/invoke", "", body)
	if res.InvokeNoKeyStatus != http.StatusUnauthorized || bytes.Contains(raw, []byte(secretValue)) {
		t.Errorf("POST /mcp/invoke without a key: %d %s, want 401", res.InvokeNoKeyStatus, raw)
	}

	// Registry search with the Smithery key stored in the credential service.
	must(d.cli(t, smitheryKey+"\n", "cred", "set-registry-key", "smithery"), "cred set-registry-key")
	r = must(d.cli(t, "", "search", searchQuery, "--json"), "search")
	var found model.RegistrySearchReply
	decode(r, &found)
	for _, e := range found.Results {
		res.SearchResults = append(res.SearchResults, e.Name+" ["+strings.Join(e.Sources, ",")+"]")
	}
	res.SearchWarnings = len(found.Warnings)
	if len(found.Warnings) > 0 || !hasSource(found, model.SourceSmithery) || !hasSource(found, model.SourceOfficial) {
		t.Errorf("search %q: want results from both registries and no warnings: %s", searchQuery, r.Stdout)
	}
	auths := d.smithery.authorizations()
	res.SmitheryAuthOK = len(auths) > 0
	for _, a := range auths {
		res.SmitheryAuthOK = res.SmitheryAuthOK && a == "Bearer "+smitheryKey
	}
	if !res.SmitheryAuthOK {
		t.Errorf("the Smithery stand-in got Authorization %q, want every request with %q", auths, "Bearer "+smitheryKey)
	}
	res.OfficialRequested = len(d.official.authorizations()) > 0

	// Disable: the child stops, its tools leave the gateway.
	r = must(d.cli(t, "", "servers", "disable", serverName, "--json"), "servers disable")
	var disabled model.McpConfig
	decode(r, &disabled)
	res.DisabledEnabled = disabled.Enabled
	res.DisabledState = d.waitState(t, model.StateDisabled, 15*time.Second).State
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
		return !alive(st.PID), fmt.Sprintf("the server process %d still runs after disable", st.PID)
	})
	res.ChildGone = !alive(st.PID)
	res.MCPToolsAfterOff = waitMCPTools(t, s, 20*time.Second, "drops "+serverName+"'s tools", func(names []string) bool {
		return len(names) == 0
	})
	// A client that is done says so: with a session left open, the gateway's
	// graceful stop waits half its shutdown timeout before ending it.
	if err := s.Close(); err != nil {
		t.Errorf("closing the /mcp session: %v", err)
	}

	// Delete: the config, its status and its secrets are gone.
	r = must(d.cli(t, "", "servers", "rm", serverName, "--json", "--yes"), "servers rm")
	var removed struct {
		ID     string `json:"id"`
		Server string `json:"server"`
	}
	decode(r, &removed)
	res.Removed = removed.Server
	r = must(d.cli(t, "", "servers", "list", "--json"), "servers list")
	var list model.ConfigListReply
	decode(r, &list)
	res.ConfigsAfterRemove = len(list.Configs)
	r = must(d.cli(t, "", "status", "--json"), "status")
	var all model.RuntimeStatusReply
	decode(r, &all)
	res.StatusAfterRemove = len(all.Servers)
	r = d.cli(t, "", "cred", "describe", serverName, "--json")
	var apiErr struct {
		Code string `json:"code"`
	}
	if r.Code == 0 || json.Unmarshal([]byte(r.Stdout), &apiErr) != nil {
		t.Errorf("cred describe after rm: %s, want a non-zero exit and an error as JSON", r)
	}
	res.DescribeAfterRm = apiErr.Code
	// The audit writers write under this deployment's permissions; the
	// last records may still be on their way.
	testkit.WaitFor(t, 15*time.Second, func() (bool, string) {
		r := d.cli(t, "", "--json", "audit", "verify")
		var rep audit.Report
		_ = json.Unmarshal([]byte(r.Stdout), &rep)
		roles := map[string]bool{}
		for _, c := range rep.Chains {
			if role, _, ok := audit.SplitChain(c.Chain); ok && c.Identity != "" {
				roles[role] = true
			}
		}
		res.AuditRoles = slices.Sorted(maps.Keys(roles))
		return r.Code == 0 && roles["runner"] && roles["config"] && roles["credential"], r.String()
	})
	return res
}

func hasSource(r model.RegistrySearchReply, source string) bool {
	for _, e := range r.Results {
		if slices.Contains(e.Sources, source) {
			return true
		}
	}
	return false
}

// --- registry stand-ins ---

// standIns are the local Official Registry and Smithery servers both
// deployments search, fed with the recorded fixtures; Smithery wants
// smitheryKey as a bearer token.
type standIns struct {
	official *registrytest.Official
	smithery *registrytest.Smithery
}

func startStandIns(t *testing.T) *standIns {
	t.Helper()
	return &standIns{official: registrytest.SampleOfficial(t), smithery: registrytest.SampleSmithery(t, smitheryKey)}
}

// recorder is a reverse proxy in front of a stand-in that records the
// Authorization header of every request: one per deployment.
type recorder struct {
	*httptest.Server
	mu   sync.Mutex
	auth []string
}

func newRecorder(t *testing.T, target string) *recorder {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	rec := &recorder{}
	rec.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.mu.Lock()
		rec.auth = append(rec.auth, r.Header.Get("Authorization"))
		rec.mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(rec.Close)
	return rec
}

func (r *recorder) authorizations() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.auth)
}

// --- deployments ---

// deployment is a running system under test.
type deployment struct {
	name     string
	dir      string // logs
	dataDir  string
	natsURL  string
	httpURL  string
	official *recorder
	smithery *recorder
	procs    []*testkit.Proc
	// http is the transport of every HTTP client of the test (/mcp and
	// /mcp/invoke) against this deployment.
	http      *http.Transport
	stopProcs func(t *testing.T)
	// env is added to the environment of every process the deployment starts.
	env []string
}

// stop closes the test's idle HTTP connections (the gateway's graceful stop
// waits up to 5 s for a connection that never sent a request, as net/http's
// Shutdown does), then stops every process with SIGTERM.
func (d *deployment) stop(t *testing.T) {
	t.Helper()
	d.http.CloseIdleConnections()
	d.stopProcs(t)
}

func newDeployment(t *testing.T, name string, si *standIns) *deployment {
	t.Helper()
	dir := t.TempDir()
	d := &deployment{name: name, dir: dir, dataDir: filepath.Join(dir, "data"),
		official: newRecorder(t, si.official.URL), smithery: newRecorder(t, si.smithery.URL),
		http: http.DefaultTransport.(*http.Transport).Clone()}
	t.Cleanup(d.http.CloseIdleConnections)
	// Registered before any process starts, so it runs after they all ended.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, p := range d.procs {
			t.Logf("--- %s log (%s, tail) ---\n%s", p.Name(), p.Log(), p.Tail(6000))
		}
	})
	return d
}

// startSplit runs a real nats-server with JetStream and the deployment's
// authorization (deploy/nats/auth.conf, the identities made by `mcpbus
// identities`) and every service as its own `mcpbus serve <service>` process
// on it, each as its own identity, sharing one data dir.
func startSplit(t *testing.T, si *standIns) *deployment {
	t.Helper()
	return startSplitEnv(t, si, nil)
}

// startSplitEnv is startSplit with serviceEnv[name] added to the environment
// of service name.
func startSplitEnv(t *testing.T, si *standIns, serviceEnv map[string][]string) *deployment {
	t.Helper()
	d := newDeployment(t, "split", si)
	natsPort := testkit.FreePort(t)
	d.natsURL = fmt.Sprintf("nats://127.0.0.1:%d", natsPort)
	ids := filepath.Join(d.dataDir, "nats")
	idEnv := d.cli(t, "", "identities", ids)
	if idEnv.Code != 0 {
		t.Fatalf("mcpbus identities: %s", idEnv)
	}
	auth, err := os.ReadFile(filepath.Join(clitest.RepoRoot(t), "deploy", "nats", "auth.conf"))
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(d.dir, "nats.conf")
	if err := os.WriteFile(filepath.Join(d.dir, "auth.conf"), auth, 0o600); err != nil {
		t.Fatal(err)
	}
	// max_file_store as deploy/nats/cluster gives it: without it the server
	// offers 75 % of the free disk, and the services' streams and the
	// tasks bucket, which reserve their bounds (6 GiB by default,
	// docs/operating.md), are refused on a machine with little free disk
	// (the test writes a few MB).
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("host: 127.0.0.1\nport: %d\nmax_payload: 8MB\njetstream { store_dir: %q, max_file_store: 20GB }\ninclude \"auth.conf\"\n",
		natsPort, filepath.Join(d.dir, "jetstream"))), 0o600); err != nil {
		t.Fatal(err)
	}
	ns := d.startEnv(t, "nats-server", strings.Fields(idEnv.Stdout), natsServer, "-c", conf)
	waitJetStream(t, ns, d.natsURL, 15*time.Second, filepath.Join(ids, "operator.nk"))

	addr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	d.httpURL = "http://" + addr
	common := []string{"--nats", d.natsURL, "--data-dir", d.dataDir, "--log-level", "debug"}
	extra := map[string][]string{
		"registry": {"--official-registry-url", d.official.URL, "--smithery-registry-url", d.smithery.URL},
		"gateway":  {"--http-addr", addr},
	}
	var services []*testkit.Proc
	for _, name := range []string{"credential", "config", "registry", "runner", "chat", "gateway"} {
		args := append(append([]string{"serve", name, "--nats-nkey", filepath.Join(ids, name+".nk")}, common...), extra[name]...)
		services = append(services, d.startEnv(t, name, serviceEnv[name], mcpbusBin, args...))
	}
	for _, p := range services {
		p.WaitLog(t, `"msg":"service ready"`, 30*time.Second)
	}
	d.stopProcs = func(t *testing.T) {
		stopAll(t, services, 15*time.Second)
		stopAll(t, []*testkit.Proc{ns}, 15*time.Second)
	}
	return d
}

// startUp runs `mcpbus up` with the same stand-ins, a free NATS port and a
// free gateway address.
func startUp(t *testing.T, si *standIns) *deployment {
	t.Helper()
	d := newDeployment(t, "up", si)
	ports := testkit.NewPorts(t)
	natsPort := ports.Next()
	d.natsURL = fmt.Sprintf("nats://127.0.0.1:%d", natsPort)
	addr := fmt.Sprintf("127.0.0.1:%d", ports.Next())
	d.httpURL = "http://" + addr
	p := d.start(t, "up", mcpbusBin, "up", "--nats-port", strconv.Itoa(natsPort), "--http-addr", addr,
		"--data-dir", d.dataDir, "--log-level", "debug",
		"--official-registry-url", d.official.URL, "--smithery-registry-url", d.smithery.URL)
	p.WaitLog(t, "mcpbus is up:", 60*time.Second)
	d.stopProcs = func(t *testing.T) { stopAll(t, []*testkit.Proc{p}, 15*time.Second) }
	return d
}

// checkNoSecretsInLogs fails if a log (debug level) holds the server's
// secret or the Smithery key.
func (d *deployment) checkNoSecretsInLogs(t *testing.T) {
	t.Helper()
	for _, p := range d.procs {
		data, err := os.ReadFile(p.Log())
		if err != nil {
			t.Error(err)
			continue
		}
		for _, s := range []string{secretValue, smitheryKey} {
			if bytes.Contains(data, []byte(s)) {
				t.Errorf("the %s log holds the secret %q", p.Name(), s)
			}
		}
	}
}

// waitJetStream waits until the nats-server accepts connections and
// JetStream answers.
func waitJetStream(t *testing.T, ns *testkit.Proc, natsURL string, within time.Duration, seed string) {
	t.Helper()
	operator, err := nats.NkeyOptionFromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, within, func() (bool, string) {
		if ns.Exited() {
			t.Fatalf("nats-server exited: %v", ns.Err())
		}
		nc, err := nats.Connect(natsURL, nats.Timeout(time.Second), nats.NoReconnect(), operator, nats.CustomInboxPrefix("_I.operator"))
		if err != nil {
			return false, "nats-server: " + err.Error()
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return false, "jetstream: " + err.Error()
		}
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		if _, err := js.AccountInfo(ctx); err != nil {
			return false, "jetstream account info: " + err.Error()
		}
		return true, ""
	})
}

// --- processes ---

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// childEnv is the test's environment without settings that would change
// what the services do: clitest.Env without SMITHERY_API_KEY.
func childEnv() []string {
	return slices.DeleteFunc(clitest.Env(), func(kv string) bool { return strings.HasPrefix(kv, "SMITHERY_API_KEY=") })
}

// start runs bin with args, output to <dir>/<name>.log; it is killed when the
// test ends if it still runs.
func (d *deployment) start(t *testing.T, name, bin string, args ...string) *testkit.Proc {
	t.Helper()
	return d.startEnv(t, name, nil, bin, args...)
}

// startEnv is start with env added to the process's environment.
func (d *deployment) startEnv(t *testing.T, name string, env []string, bin string, args ...string) *testkit.Proc {
	t.Helper()
	p := testkit.StartProc(t, testkit.ProcOptions{Name: name, Bin: bin, Args: args, Dir: d.dir,
		Env: append(append(childEnv(), d.env...), env...)})
	d.procs = append(d.procs, p)
	return p
}

// slowStop is how long a stop may take before its log is shown (it fails
// only after stopAll's within).
const slowStop = 3 * time.Second

// stopAll sends SIGTERM to every process at once; each must exit 0 within.
func stopAll(t *testing.T, procs []*testkit.Proc, within time.Duration) {
	t.Helper()
	var took []string
	for i, dur := range testkit.StopAll(t, procs, within) {
		if dur == 0 {
			continue // did not exit: StopAll failed the test
		}
		p := procs[i]
		took = append(took, fmt.Sprintf("%s %s", p.Name(), dur.Round(time.Millisecond)))
		if dur > slowStop {
			t.Logf("%s took over %s to stop; its log (tail):\n%s", p.Name(), slowStop, p.Tail(6000))
		}
	}
	t.Logf("stopped after SIGTERM: %s", strings.Join(took, ", "))
}

// --- the CLI ---

// cli runs one mcpbus client command against the deployment's NATS, stdin
// fed from stdin. The CLI finds mcpbus up's operator identity in the data
// dir (the split deployment's nats-server runs without authentication).
func (d *deployment) cli(t *testing.T, stdin string, args ...string) clitest.Result {
	t.Helper()
	c := clitest.CLI{Bin: mcpbusBin, NATS: d.natsURL, DataDir: d.dataDir, Env: childEnv(), Timeout: 40 * time.Second}
	return c.RunInput(t, stdin, args...)
}

// waitState polls `mcpbus status <server> --json` until the server is in state.
func (d *deployment) waitState(t *testing.T, state string, within time.Duration) model.Status {
	t.Helper()
	var st model.Status
	testkit.WaitFor(t, within, func() (bool, string) {
		r := d.cli(t, "", "status", serverName, "--json")
		var reply model.RuntimeStatusReply
		if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &reply) != nil || len(reply.Servers) != 1 {
			return false, r.String()
		}
		st = reply.Servers[0]
		return st.State == state, fmt.Sprintf("%s is %q, want %q (%s)", serverName, st.State, state, r)
	})
	return st
}

// --- plain NATS ---

// natsCall sends a plain NATS request to mcp.v1.call.<server>.<tool> and
// returns the text of the CallToolResult.
func (d *deployment) natsCall(t *testing.T, tool, args string) string {
	t.Helper()
	opts := []nats.Option{nats.Timeout(5 * time.Second)}
	if seed := filepath.Join(d.dataDir, "nats", "operator.nk"); fileExists(seed) {
		// mcpbus up's bus needs an identity: the operator's, as the CLI uses.
		opt, err := nats.NkeyOptionFromSeed(seed)
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, opt, nats.CustomInboxPrefix("_I.operator"))
	}
	nc, err := nats.Connect(d.natsURL, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	msg, err := nc.Request("mcp.v1.call."+serverName+"."+tool, []byte(args), 20*time.Second)
	if err != nil {
		t.Fatalf("plain NATS call %s.%s: %v", serverName, tool, err)
	}
	if code := msg.Header.Get("Nats-Service-Error-Code"); code != "" {
		t.Fatalf("plain NATS call %s.%s answered error %s: %s", serverName, tool, code, msg.Data)
	}
	return resultText(msg.Data)
}

// resultText joins the text content of a CallToolResult ("" when it is not one).
func resultText(raw []byte) string {
	var r struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	}
	if json.Unmarshal(raw, &r) != nil {
		return ""
	}
	var texts []string
	for _, c := range r.Content {
		if c.Type == "text" {
			texts = append(texts, c.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// --- the gateway ---

// adminKey is the bootstrap admin key the gateway wrote to the data dir.
func (d *deployment) adminKey(t *testing.T) string {
	t.Helper()
	key, err := os.ReadFile(filepath.Join(d.dataDir, "admin.key"))
	if err != nil {
		t.Fatalf("reading the admin key: %v", err)
	}
	return strings.TrimSpace(string(key))
}

// bearer adds an Authorization header to every request.
type bearer struct {
	key  string
	base http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return b.base.RoundTrip(r)
}

// connectMCP opens a go-sdk client session to the gateway's /mcp.
func (d *deployment) connectMCP(t *testing.T, key string) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "split-e2e", Version: "1"}, nil)
	tr := &mcp.StreamableClientTransport{Endpoint: d.httpURL + "/mcp", MaxRetries: -1,
		HTTPClient: &http.Client{Transport: bearer{key: key, base: d.http}}}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	s, err := client.Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("connecting to %s/mcp: %v", d.httpURL, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// waitMCPTools lists the gateway's tools of serverName until cond holds.
func waitMCPTools(t *testing.T, s *mcp.ClientSession, within time.Duration, what string, cond func([]string) bool) []string {
	t.Helper()
	var names []string
	testkit.WaitFor(t, within, func() (bool, string) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		names = []string{}
		for tool, err := range s.Tools(ctx, nil) {
			if err != nil {
				return false, "tools/list: " + err.Error()
			}
			if strings.HasPrefix(tool.Name, serverName+"__") {
				names = append(names, tool.Name)
			}
		}
		slices.Sort(names)
		return cond(names), fmt.Sprintf("the gateway's tool list never %s: %v", what, names)
	})
	return names
}

// mcpCallText calls a tool through /mcp; an error or isError fails the test.
func mcpCallText(t *testing.T, s *mcp.ClientSession, name string, args any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("tools/call %s: %v", name, err)
	}
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	text := strings.Join(parts, "\n")
	if res.IsError {
		t.Fatalf("tools/call %s: tool error: %s", name, text)
	}
	return text
}

// httpPost posts a JSON body to the gateway with key ("" = none).
func (d *deployment) httpPost(t *testing.T, path, key, body string) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.httpURL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := (&http.Client{Transport: d.http}).Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, data
}

// --- small helpers ---

// alive reports whether pid is a live process (a zombie counts as dead).
func alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && !strings.HasPrefix(strings.TrimSpace(s[i+1:]), "Z")
}

// checkHostile tries, against a deployment, what a local attacker would: a
// connection without credentials, and another service's identity (the
// gateway's) resolving secrets or answering calls. NATS refuses each.
func checkHostile(t *testing.T, d *deployment) {
	t.Helper()
	if nc, err := nats.Connect(d.natsURL, nats.NoReconnect(), nats.Timeout(2*time.Second)); err == nil {
		nc.Close()
		t.Errorf("%s: a connection without credentials was accepted", d.name)
	}
	seed, err := nats.NkeyOptionFromSeed(filepath.Join(d.dataDir, "nats", "gateway.nk"))
	if err != nil {
		t.Fatal(err)
	}
	violations := make(chan string, 8)
	nc, err := nats.Connect(d.natsURL, seed, nats.CustomInboxPrefix("_I.gateway"), nats.NoReconnect(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err.Error() }))
	if err != nil {
		t.Fatalf("%s: the gateway identity: %v", d.name, err)
	}
	defer nc.Close()
	if _, err := nc.Request("mcp.v1.cred.resolve", []byte(`{}`), 500*time.Millisecond); err == nil {
		t.Errorf("%s: cred.resolve answered the gateway identity", d.name)
	}
	sub, err := nc.Subscribe("mcp.v1.call.>", func(*nats.Msg) {})
	if err == nil {
		defer func() { _ = sub.Unsubscribe() }()
	}
	// The gateway's own requests with replies aimed at what the runner may write.
	attack.RepliesAimedAtBuckets(t, nc, d.name)
	want := map[string]bool{"mcp.v1.cred.resolve": false, "mcp.v1.call.>": false}
	deadline := time.After(3 * time.Second)
	for !want["mcp.v1.cred.resolve"] || !want["mcp.v1.call.>"] {
		select {
		case v := <-violations:
			for subject := range want {
				if strings.Contains(v, "Permissions Violation") && strings.Contains(v, `"`+subject+`"`) {
					want[subject] = true
				}
			}
		case <-deadline:
			t.Errorf("%s: permission violations seen: %v", d.name, want)
			return
		}
	}
}
