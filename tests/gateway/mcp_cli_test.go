package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
	"github.com/mcpbus/mcpbus/tests/internal/clitest"
)

// upProc is a running `mcpbus up` with its gateway.
type upProc struct {
	*clitest.Up
	httpURL string
}

// startUpGateway runs `mcpbus up` on free NATS and HTTP ports with the test
// servers named in servers, and waits until the gateway answers and they run.
func startUpGateway(t *testing.T, bin string, servers ...string) *upProc {
	t.Helper()
	return startUpGatewayEnv(t, bin, nil, servers...)
}

// startUpGatewayEnv is startUpGateway with env(gateway base URL) added to
// up's environment (settings that name the gateway's own URL).
func startUpGatewayEnv(t *testing.T, bin string, env func(httpURL string) []string, servers ...string) *upProc {
	t.Helper()
	dir := t.TempDir()
	var yaml strings.Builder
	yaml.WriteString("servers:\n")
	for _, name := range servers {
		fmt.Fprintf(&yaml, "  - name: %s\n    enabled: true\n    package: {type: binary, identifier: %q, args: [\"-name\", %q]}\n    transport: {type: stdio}\n    env_vars: {SERVER_ID: {value: %q}}\n",
			name, testServer, name, name)
	}
	cfg := filepath.Join(dir, "servers.yaml")
	if err := os.WriteFile(cfg, []byte(yaml.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--data-dir", filepath.Join(dir, "data"), "--config", cfg, "--log-level", "debug"}
	p := &upProc{}
	var extra []string
	if env != nil {
		// The settings name the gateway's URL before it runs: pick the
		// ports here (without env, up binds free ones and says which).
		natsPort, httpPort := testkit.FreePort(t), testkit.FreePort(t)
		p.httpURL = fmt.Sprintf("http://127.0.0.1:%d", httpPort)
		extra = env(p.httpURL)
		args = append(args, "--nats-port", strconv.Itoa(natsPort), "--http-addr", fmt.Sprintf("127.0.0.1:%d", httpPort))
	}
	p.Up = clitest.StartUp(t, bin, clitest.UpOptions{Dir: dir, Env: clitest.Env(extra...), Args: args})
	if p.httpURL == "" {
		p.httpURL = p.HTTPURL()
	}

	// The gateway answers, then every server runs (the runner's status in KV).
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := http.Get(p.httpURL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if p.Exited() {
			t.Fatalf("mcpbus up exited: %v", p.Err())
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway of mcpbus up is not ready at %s after 90s (%v)", p.httpURL, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// mcpbus up's bus needs an identity: the operator's, as the CLI uses.
	operator, err := nats.NkeyOptionFromSeed(filepath.Join(p.DataDir(), "nats", "operator.nk"))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(p.NATSURL(), nats.Timeout(10*time.Second), operator, nats.CustomInboxPrefix("_I.operator"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := client.New(nc, client.Options{})
	for {
		st, err := c.Status(ctxT(t, 10*time.Second))
		running := 0
		for _, s := range st {
			if slices.Contains(servers, s.Server) && s.State == model.StateRunning {
				running++
			}
		}
		if err == nil && running == len(servers) {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("servers %v not all running after 90s: %+v %v", servers, st, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// adminKey reads the admin key `up` wrote.
func (p *upProc) adminKey(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(p.DataDir(), auth.AdminKeyFile))
	if err != nil {
		t.Fatalf("the admin key of mcpbus up: %v", err)
	}
	return strings.TrimSpace(string(data))
}

// runCLI runs one mcpbus client command against the up as its operator.
func (p *upProc) runCLI(t *testing.T, args ...string) clitest.Result {
	t.Helper()
	c := p.CLI()
	c.Timeout = 60 * time.Second
	return c.Run(t, args...)
}

// TestMCPKeysCLI manages keys with the built CLI against a real `mcpbus up`:
// a key made with --allow-tool sees and calls only its tools over /mcp, list
// never shows a secret, and `keys revoke` shuts the key out at once, an open
// MCP session included.
func TestMCPKeysCLI(t *testing.T) {
	t.Parallel()
	bin := mcpbusBin
	up := startUpGateway(t, bin, "alpha", "beta")
	admin := connectMCP(t, up.httpURL, up.adminKey(t))
	waitList(t, admin.ClientSession, 30*time.Second, "held both echos", func(m map[string]*mcp.Tool) bool {
		return m["alpha__echo"] != nil && m["beta__echo"] != nil
	})

	r := up.runCLI(t, "--json", "keys", "create", "ci-agent", "--allow-tool", "alpha__echo", "--allow-tool", "alpha__env")
	var created model.KeyCreateReply
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &created) != nil || created.Key == "" || created.ID == "" {
		t.Fatalf("keys create: %s", r)
	}
	if !slices.Equal(created.Scopes, []string{model.KeyScopeCall}) || !slices.Equal(created.Tools.Allow, []string{"alpha__echo", "alpha__env"}) {
		t.Errorf("keys create: scopes %v, tools %+v", created.Scopes, created.Tools)
	}

	s := connectMCP(t, up.httpURL, created.Key)
	if names := sortedNames(listTools(t, s.ClientSession)); !slices.Equal(names, []string{"alpha__echo", "alpha__env"}) {
		t.Fatalf("the --allow-tool key lists %v, want [alpha__echo alpha__env]", names)
	}
	if got := callText(t, s.ClientSession, "alpha__env", map[string]any{"name": "SERVER_ID"}); got != "alpha" {
		t.Errorf("alpha__env returned %q", got)
	}
	if _, err := callTool(t, s.ClientSession, "beta__echo", map[string]any{"message": "x"}); err == nil {
		t.Error("the --allow-tool key called beta__echo")
	}

	r = up.runCLI(t, "--json", "keys", "list")
	var list model.KeyListReply
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &list) != nil {
		t.Fatalf("keys list: %s", r)
	}
	if !slices.ContainsFunc(list.Keys, func(k model.APIKey) bool { return k.ID == created.ID && k.Name == "ci-agent" }) {
		t.Errorf("keys list does not show %s: %s", created.ID, r.Stdout)
	}
	_, secret, _ := strings.Cut(strings.TrimPrefix(created.Key, auth.KeyPrefix), "_")
	if strings.Contains(r.Stdout+r.Stderr, secret) || strings.Contains(up.Output(), secret) {
		t.Fatal("a key's secret was shown by keys list or logged by up")
	}

	r = up.runCLI(t, "keys", "revoke", created.ID)
	if r.Code != 0 || !strings.Contains(r.Stdout, "revoked "+created.ID) {
		t.Fatalf("keys revoke: %s", r)
	}
	// The open session is refused now, and so is a new one.
	_, err := tryListTools(ctxT(t, 20*time.Second), s.ClientSession)
	statuses, _ := s.http.seen()
	if err == nil || statuses[len(statuses)-1] != http.StatusUnauthorized {
		t.Errorf("the open session after keys revoke: %v, HTTP statuses %v, want a 401", err, statuses)
	}
	s2, err := dialMCP(t, up.httpURL, created.Key)
	wantRefused(t, "a key revoked with the CLI", s2, err, `error="invalid_token"`)

	r = up.runCLI(t, "--json", "keys", "list", "--all")
	list = model.KeyListReply{}
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &list) != nil {
		t.Fatalf("keys list --all: %s", r)
	}
	if !slices.ContainsFunc(list.Keys, func(k model.APIKey) bool { return k.ID == created.ID && k.Revoked() }) {
		t.Errorf("keys list --all does not show %s as revoked: %s", created.ID, r.Stdout)
	}
	// Bad input: a clear error, nothing changed.
	if r := up.runCLI(t, "keys", "revoke", "not-an-id"); r.Code == 0 || !strings.Contains(r.Stderr, "VALIDATION_ERROR") {
		t.Errorf("keys revoke not-an-id: %s, want a non-zero exit and VALIDATION_ERROR", r)
	}
	// The admin session was never affected.
	if got := callText(t, admin.ClientSession, "beta__echo", map[string]any{"message": "admin"}); got != "admin" {
		t.Errorf("beta__echo as admin returned %q", got)
	}
	_ = admin.Close()
	t.Logf("mcpbus up exited %s after SIGTERM", up.Stop(t, 20*time.Second).Round(time.Millisecond))
}

// TestMCPServeStdio runs the built `mcpbus serve-stdio` as a go-sdk
// CommandTransport against a running `mcpbus up`: it lists the aggregate,
// calls a tool, relays progress, and honours --allow-tool.
func TestMCPServeStdio(t *testing.T) {
	t.Parallel()
	bin := mcpbusBin
	up := startUpGateway(t, bin, "alpha", "beta")

	stdio := func(t *testing.T, args ...string) (*mcpSession, *testkit.LogBuffer, *exec.Cmd) {
		t.Helper()
		stderr := &testkit.LogBuffer{}
		cmd := up.CLI().Command(context.Background(), append([]string{"serve-stdio"}, args...)...)
		cmd.Stderr = stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		s := &mcpSession{listChanged: make(chan struct{}, 64), gotProg: make(chan struct{}, 1)}
		cs, err := newRecordingClient(s).Connect(ctxT(t, 60*time.Second), &mcp.CommandTransport{Command: cmd, TerminateDuration: 5 * time.Second}, nil)
		if err != nil {
			t.Fatalf("serve-stdio: %v\nstderr: %s", err, stderr.String())
		}
		t.Cleanup(func() {
			_ = cs.Close()
			if t.Failed() {
				t.Logf("serve-stdio stderr:\n%s", stderr.Tail(4000))
			}
		})
		s.ClientSession = cs
		return s, stderr, cmd
	}

	s, _, cmd := stdio(t)
	if init := s.InitializeResult(); init == nil || init.ServerInfo == nil || init.ServerInfo.Name != "mcpbus" {
		t.Errorf("serve-stdio server info: %+v", init)
	}
	tools := waitList(t, s.ClientSession, 30*time.Second, "held both echos", func(m map[string]*mcp.Tool) bool {
		return m["alpha__echo"] != nil && m["beta__echo"] != nil
	})
	if srv, orig := metaOf(tools["beta__echo"]); srv != "beta" || orig != "echo" {
		t.Errorf("beta__echo _meta %s/%s", srv, orig)
	}
	if got := callText(t, s.ClientSession, "alpha__echo", map[string]any{"message": "over stdio"}); got != "over stdio" {
		t.Errorf("alpha__echo over serve-stdio returned %q", got)
	}
	if got := callText(t, s.ClientSession, "beta__env", map[string]any{"name": "SERVER_ID"}); got != "beta" {
		t.Errorf("beta__env over serve-stdio returned %q", got)
	}
	params := &mcp.CallToolParams{Name: "alpha__progress", Arguments: map[string]any{"steps": 3, "ms": 50}}
	params.SetProgressToken("stdio-progress")
	res, err := s.CallTool(ctxT(t, 60*time.Second), params)
	if err != nil || textOf(res) != "done 3 steps" {
		t.Fatalf("alpha__progress: %v %+v", err, res)
	}
	// serve-stdio writes them before the result, but go-sdk's client hands
	// notifications to their handler on a goroutine of its own: the last
	// may reach it just after CallTool returned.
	var relayed int
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		relayed = 0
		for _, p := range s.progressSeen() {
			if p.ProgressToken == "stdio-progress" {
				relayed++
			}
		}
		if relayed >= 3 || time.Now().After(deadline) {
			break
		}
	}
	if relayed != 3 {
		t.Errorf("%d progress notifications relayed over stdio, want 3", relayed)
	}

	// --allow-tool narrows what this stdio server offers.
	f, _, fcmd := stdio(t, "--allow-tool", "beta__*", "--deny-tool", "*__crash")
	got := sortedNames(listTools(t, f.ClientSession))
	var want []string
	for name := range tools {
		if strings.HasPrefix(name, "beta__") && name != "beta__crash" {
			want = append(want, name)
		}
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("serve-stdio --allow-tool beta__* --deny-tool *__crash lists %v, want %v", got, want)
	}
	if _, err := callTool(t, f.ClientSession, "alpha__echo", map[string]any{"message": "x"}); err == nil {
		t.Error("the filtered serve-stdio called alpha__echo")
	}

	// As an agent: only the tools its globs match, through its own subjects
	// (an agent has no JetStream: the catalog comes from its tools.list).
	r := up.runCLI(t, "--json", "agents", "create", "stdio-agent", "--allow-tool", "alpha__ech*")
	var agent model.Agent
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &agent) != nil {
		t.Fatalf("agents create: %s", r)
	}
	ag, agStderr, agCmd := stdio(t, "--nats-nkey", agent.SeedFile)
	if got := sortedNames(listTools(t, ag.ClientSession)); !slices.Equal(got, []string{"alpha__echo"}) {
		t.Errorf("serve-stdio as agent alpha__ech* lists %v", got)
	}
	if got := callText(t, ag.ClientSession, "alpha__echo", map[string]any{"message": "as agent"}); got != "as agent" {
		t.Errorf("alpha__echo as agent returned %q", got)
	}
	for _, name := range []string{"alpha__env", "beta__echo"} {
		if res, err := callTool(t, ag.ClientSession, name, map[string]any{"name": "SERVER_ID", "message": "x"}); err == nil && !res.IsError {
			t.Errorf("the agent called %s: %+v", name, res)
		}
	}
	if strings.Contains(agStderr.String(), "ermissions") {
		t.Errorf("serve-stdio as agent hit a permission:\n%s", agStderr.String())
	}
	// A command the agent may not run says so, rather than timing out.
	if r := up.runCLI(t, "--nats-nkey", agent.SeedFile, "servers", "list"); r.Code == 0 || !strings.Contains(r.Stderr, "refused this identity") {
		t.Errorf("servers list as an agent: %s, want the bus's refusal named", r)
	}

	// Closing stdin ends each process by itself: no SIGTERM needed (the
	// transport sends one after TerminateDuration, 5s).
	for _, c := range []struct {
		s   *mcpSession
		cmd *exec.Cmd
	}{{s, cmd}, {f, fcmd}, {ag, agCmd}} {
		closeStart := time.Now()
		if err := c.s.Close(); err != nil {
			t.Errorf("closing a serve-stdio session: %v", err)
		}
		took := time.Since(closeStart)
		t.Logf("serve-stdio %v exited %s after its client closed", c.cmd.Args[3:], took.Round(time.Millisecond))
		if st := c.cmd.ProcessState; st == nil || !st.Exited() || st.ExitCode() != 0 || took >= 5*time.Second {
			t.Errorf("serve-stdio %v after its client closed stdin: %v after %s, want exit 0 before the 5s SIGTERM", c.cmd.Args[3:], st, took)
		}
	}
	t.Logf("mcpbus up exited %s after SIGTERM", up.Stop(t, 20*time.Second).Round(time.Millisecond))
}
