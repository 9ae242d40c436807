package runner_test

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// startLogged is a binary config of the test server that appends a line to
// the returned file each time it is spawned.
func startLogged(t *testing.T, name, path string) (model.McpConfig, string) {
	t.Helper()
	starts := filepath.Join(t.TempDir(), "starts")
	cfg := runnertest.Binary(name, path)
	cfg.EnvVars = map[string]model.EnvVar{"TESTMCP_START_LOG": {Value: starts}}
	return cfg, starts
}

func spawns(t *testing.T, starts string) int {
	t.Helper()
	b, err := os.ReadFile(starts)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// wantRefused waits for slug to end in error with a VALIDATION_ERROR whose
// message holds every part, and checks nothing was spawned, neither then nor
// on a call or a runtime.start.
func wantRefused(t *testing.T, e *runnertest.Env, slug, starts string, parts ...string) {
	t.Helper()
	st := e.WaitState(t, slug, model.StateError, 10*time.Second)
	if st.Code != string(apierr.Validation) {
		t.Fatalf("status code %q, want %s: %+v", st.Code, apierr.Validation, st)
	}
	for _, p := range parts {
		if !strings.Contains(st.Message, p) {
			t.Fatalf("status message %q should contain %q", st.Message, p)
		}
	}
	// A call finds the server in error, and says why.
	_, err := call(t, e, slug, "echo", `{"message":"x"}`)
	if ce := wantCode(t, err, apierr.ServiceUnavailable); !strings.Contains(ce.Message, parts[0]) {
		t.Fatalf("call error %q should say why: %q", ce.Message, parts[0])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = e.Client.Runtime(ctx, "start", slug)
	wantCode(t, err, apierr.Validation)
	if n := spawns(t, starts); n != 0 {
		t.Fatalf("a refused server was spawned %d times", n)
	}
	if st := e.Status(slug); st.State != model.StateError || st.Restarts != 0 || !st.RetryAt.IsZero() {
		t.Fatalf("a refused server must stay in error without retries: %+v", st)
	}
}

func TestExecPolicyRefusesPackageType(t *testing.T) {
	opts := quickOpts()
	opts.ID = "r1"
	opts.ExecTypes = []string{model.PackageNPM, model.PackageDocker, model.PackageHTTP}
	e := runnertest.Start(t, opts)
	cfg, starts := startLogged(t, "bin", testServer)
	e.Put(t, cfg)
	wantRefused(t, e, "bin", starts, "package type binary is not allowed on runner r1 (--exec-types npm,docker,http)")
}

func TestExecPolicyRefusesBinaryPrefix(t *testing.T) {
	allowed := t.TempDir()
	opts := quickOpts()
	opts.ID = "r1"
	opts.ExecBinaryPrefixes = []string{allowed}
	e := runnertest.Start(t, opts)

	// Outside every prefix.
	cfg, starts := startLogged(t, "outside", testServer)
	e.Put(t, cfg)
	wantRefused(t, e, "outside", starts, "binary "+testServer+" is not under an allowed path on runner r1",
		"(--exec-binary-prefixes "+allowed+")")

	// Out through "..": the path is cleaned before the check.
	cfg, starts = startLogged(t, "dotdot", allowed+"/../"+filepath.Base(testServer))
	e.Put(t, cfg)
	wantRefused(t, e, "dotdot", starts, "is not under an allowed path")

	// A symlink under the prefix that leads out of it.
	link := filepath.Join(allowed, "link")
	if err := os.Symlink(testServer, link); err != nil {
		t.Fatal(err)
	}
	cfg, starts = startLogged(t, "link", link)
	e.Put(t, cfg)
	wantRefused(t, e, "link", starts, "resolves to "+testServer)

	// A copy under the prefix runs.
	inside := filepath.Join(allowed, "sub", "mcpbus-testserver")
	copyFile(t, testServer, inside)
	cfg, starts = startLogged(t, "inside", inside)
	e.Put(t, cfg)
	e.WaitState(t, "inside", model.StateRunning, 10*time.Second)
	if n := spawns(t, starts); n != 1 {
		t.Fatalf("an allowed binary was spawned %d times, want 1", n)
	}
}

// A running server whose config changes to a refused package stops and ends in error.
func TestExecPolicyRefusesUpdatedPackage(t *testing.T) {
	allowed := t.TempDir()
	inside := filepath.Join(allowed, "mcpbus-testserver")
	copyFile(t, testServer, inside)
	opts := quickOpts()
	opts.ExecBinaryPrefixes = []string{allowed}
	e := runnertest.Start(t, opts)
	cfg, starts := startLogged(t, "moving", inside)
	cfg = e.Put(t, cfg)
	st := e.WaitState(t, "moving", model.StateRunning, 10*time.Second)
	cfg.Package.Identifier = testServer
	e.Put(t, cfg)
	e.WaitState(t, "moving", model.StateError, 10*time.Second)
	waitGone(t, st.PID, 5*time.Second)
	if n := spawns(t, starts); n != 1 {
		t.Fatalf("spawned %d times, want 1 (the allowed revision only)", n)
	}
}

func TestExecPolicyInServiceMetadata(t *testing.T) {
	opts := quickOpts()
	opts.ID = "r1"
	opts.ExecTypes = []string{model.PackageNPM, model.PackageHTTP}
	opts.ExecBinaryPrefixes = []string{"/opt/mcp/", "/usr/local/bin"}
	e := runnertest.Start(t, opts)
	msg, err := e.NC.Request("$SRV.INFO."+runner.ServiceName, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var info micro.Info
	if err := json.Unmarshal(msg.Data, &info); err != nil {
		t.Fatal(err)
	}
	md := info.Metadata
	if md["runner"] != "r1" || md[model.MetaExecTypes] != "npm,http" || md[model.MetaExecBinaryPrefixes] != "/opt/mcp,/usr/local/bin" {
		t.Fatalf("metadata %v", md)
	}
	p, ok := model.ExecPolicyFromMetadata(md)
	if !ok || strings.Join(p.Types, ",") != "npm,http" || len(p.BinaryPrefixes) != 2 {
		t.Fatalf("policy %+v %v", p, ok)
	}
}

func TestExecPolicyDefaultAllowsEverything(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	msg, err := e.NC.Request("$SRV.INFO."+runner.ServiceName, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var info micro.Info
	if err := json.Unmarshal(msg.Data, &info); err != nil {
		t.Fatal(err)
	}
	if got := info.Metadata[model.MetaExecTypes]; got != "npm,docker,binary,http" {
		t.Fatalf("exec_types %q", got)
	}
	if got, ok := info.Metadata[model.MetaExecBinaryPrefixes]; !ok || got != "" {
		t.Fatalf("exec_binary_prefixes %q %v", got, ok)
	}
}

func TestExecPolicyOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		o    runner.Options
		want string
	}{
		{runner.Options{ExecTypes: []string{}}, "--exec-types is empty"},
		{runner.Options{ExecTypes: []string{"npm", "python"}}, `--exec-types "python"`},
		{runner.Options{ExecBinaryPrefixes: []string{"bin"}}, "must be an absolute path"},
		{runner.Options{ExecBinaryPrefixes: []string{"/a,b"}}, "must not contain a comma"},
	} {
		err := tc.o.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.o, err, tc.want)
		}
	}
	ok := runner.Options{ExecTypes: []string{"npm", "docker", "http"}, ExecBinaryPrefixes: []string{"/opt/mcp"}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// Issue 27: what an admin API key tried against the compose policy (--exec-types
// npm,docker,http --exec-binary-prefixes /opt/mcp), written straight into the
// configs bucket as if the config service had not checked it: the runner
// refuses each at spawn, naming the field, and runs nothing (the fake npx and
// docker, and the script a hint named, would write the canary).
func TestExecPolicyRefusesEveryField(t *testing.T) {
	bin := t.TempDir()
	canary := filepath.Join(t.TempDir(), "canary")
	script := "#!/bin/sh\necho \"$0 $*\" >> " + canary + "\n"
	for _, name := range []string{"npx", "docker", "any.sh"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	keys := t.TempDir()
	secret := filepath.Join(t.TempDir(), "operator.nk")
	if err := os.WriteFile(secret, []byte("SO-seed"), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := quickOpts()
	opts.ID = "r1"
	opts.ExecTypes = []string{model.PackageNPM, model.PackageDocker, model.PackageHTTP}
	opts.ExecBinaryPrefixes = []string{"/opt/mcp"}
	opts.KeyfilePrefixes = []string{keys}
	e := runnertest.Start(t, opts)
	npm := func(slug string, mod func(*model.McpConfig)) model.McpConfig {
		c := model.McpConfig{Name: slug, Slug: slug, Enabled: true, Runtime: model.Runtime{Eager: true},
			Package: model.Package{Type: model.PackageNPM, Identifier: "pkg"}, Transport: model.Transport{Type: model.TransportStdio}}
		mod(&c)
		return c
	}
	for _, tc := range []struct {
		cfg   model.McpConfig
		field string
	}{
		{npm("hint", func(c *model.McpConfig) { c.Package.RuntimeHint = filepath.Join(bin, "any.sh") }), "package.runtime_hint"},
		{npm("shell", func(c *model.McpConfig) {
			c.Package.RuntimeArgs = []string{"-c"}
			c.Package.Identifier = "echo pwned > " + canary
		}), "package.runtime_args.0"},
		{npm("nodeopts", func(c *model.McpConfig) {
			c.EnvVars = map[string]model.EnvVar{"NODE_OPTIONS": {Value: "--import=data:text/javascript,1"}}
		}), "env_vars.NODE_OPTIONS"},
		{npm("preload", func(c *model.McpConfig) { c.EnvVars = map[string]model.EnvVar{"LD_PRELOAD": {Value: "/tmp/x.so"}} }), "env_vars.LD_PRELOAD"},
		{npm("npmcall", func(c *model.McpConfig) { c.EnvVars = map[string]model.EnvVar{"npm_config_call": {Value: "sh"}} }), "env_vars.npm_config_call"},
		{npm("keyfile", func(c *model.McpConfig) { c.EnvVars = map[string]model.EnvVar{"K": {KeyfilePath: secret}} }), "env_vars.K.keyfile_path"},
		{model.McpConfig{Name: "priv", Slug: "priv", Enabled: true, Runtime: model.Runtime{Eager: true},
			Package:   model.Package{Type: model.PackageDocker, Identifier: "alpine", RuntimeArgs: []string{"--privileged", "-v", "/:/host", "--pid=host"}},
			Transport: model.Transport{Type: model.TransportStdio}}, "package.runtime_args.0"},
		{model.McpConfig{Name: "mount", Slug: "mount", Enabled: true, Runtime: model.Runtime{Eager: true},
			Package:   model.Package{Type: model.PackageDocker, Identifier: "alpine", RuntimeArgs: []string{"-v", "/:/host"}},
			Transport: model.Transport{Type: model.TransportStdio}}, "package.runtime_args.0"},
		// Secrets in clear (a config stored before the save-time rule, or
		// written to KV by hand) are not passed on either.
		{npm("argsecret", func(c *model.McpConfig) { c.Package.Args = []string{"--api-key=sk-live-0123456789abcdef"} }), "package.args.0"},
		{model.McpConfig{Name: "urlsecret", Slug: "urlsecret", Enabled: true, Runtime: model.Runtime{Eager: true},
			Transport: model.Transport{Type: model.TransportHTTP, URL: "https://mcp.example.com/mcp?token=tok-0123456789abcdef"}}, "transport.url"},
	} {
		e.Put(t, tc.cfg)
		st := e.WaitState(t, tc.cfg.Slug, model.StateError, 10*time.Second)
		if st.Code != string(apierr.Validation) || st.Field != tc.field {
			t.Errorf("%s: status %+v, want VALIDATION_ERROR on %s", tc.cfg.Slug, st, tc.field)
		}
	}
	if b, err := os.ReadFile(canary); err == nil {
		t.Fatalf("a refused config ran: %s", b)
	}
}
