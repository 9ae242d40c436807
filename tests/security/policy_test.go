package security

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/tools/mcpbus/stack"
)

// composeRunner is the runner policy of docker-compose.yml.
func composeRunner() runner.Options {
	return runner.Options{StopGrace: 100 * time.Millisecond, StopTimeout: 2 * time.Second,
		ExecTypes: []string{model.PackageNPM, model.PackageDocker, model.PackageHTTP}, ExecBinaryPrefixes: []string{"/opt/mcp"}}
}

// startPolicyStack starts the whole system with runner options ro, its bus
// open (--insecure-bus: the test listens to everything) and the REST API.
func startPolicyStack(t *testing.T, ro runner.Options) (*stack.Stack, string) {
	t.Helper()
	logs := &testkit.LogBuffer{}
	dataDir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := stack.Start(ctx, stack.Options{DataDir: dataDir, NATSPort: -1, InsecureBus: true,
		Logger:  slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Runner:  ro,
		Gateway: &gateway.Options{Addr: "127.0.0.1:0"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		st.Close()
		if t.Failed() {
			t.Logf("log tail:\n%s", logs.Tail(4000))
		}
	})
	return st, dataDir
}

// fakeRuntimes puts an npx, a docker and a script on PATH that write the
// returned canary file when run: a refused config must leave it absent.
func fakeRuntimes(t *testing.T) (bin, canary string) {
	t.Helper()
	bin = t.TempDir()
	canary = filepath.Join(t.TempDir(), "canary")
	script := "#!/bin/sh\necho \"$0 $*\" >> " + canary + "\n"
	for _, name := range []string{"npx", "docker", "any.sh"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	return bin, canary
}

// TestExecPolicyAtSave: each attack of issue 27 is refused when it is saved,
// with the field named, by the compose policy and by the defaults, and
// nothing runs.
func TestExecPolicyAtSave(t *testing.T) {
	bin, canary := fakeRuntimes(t)
	for name, ro := range map[string]runner.Options{"compose": composeRunner(),
		"defaults": {StopGrace: 100 * time.Millisecond, StopTimeout: 2 * time.Second}} {
		t.Run(name, func(t *testing.T) {
			st, dataDir := startPolicyStack(t, ro)
			npm := func(mod func(*model.McpConfig)) model.McpConfig {
				c := model.McpConfig{Name: "x", Enabled: true, Runtime: model.Runtime{Eager: true},
					Package: model.Package{Type: model.PackageNPM, Identifier: "pkg"}, Transport: model.Transport{Type: model.TransportStdio}}
				mod(&c)
				return c
			}
			docker := func(args ...string) model.McpConfig {
				return model.McpConfig{Name: "x", Enabled: true, Runtime: model.Runtime{Eager: true},
					Package:   model.Package{Type: model.PackageDocker, Identifier: "alpine", RuntimeArgs: args},
					Transport: model.Transport{Type: model.TransportStdio}}
			}
			for attack, tc := range map[string]struct {
				cfg   model.McpConfig
				field string
			}{
				"1 runtime_hint path": {npm(func(c *model.McpConfig) { c.Package.RuntimeHint = filepath.Join(bin, "any.sh") }), "package.runtime_hint"},
				"2 npx -c shell": {npm(func(c *model.McpConfig) {
					c.Package.RuntimeArgs = []string{"-c"}
					c.Package.Identifier = "echo pwned >> " + canary
				}), "package.runtime_args.0"},
				"3 NODE_OPTIONS": {npm(func(c *model.McpConfig) {
					c.EnvVars = map[string]model.EnvVar{"NODE_OPTIONS": {Value: "--import=data:text/javascript,1"}}
				}), "env_vars.NODE_OPTIONS"},
				"3 LD_PRELOAD":        {npm(func(c *model.McpConfig) { c.EnvVars = map[string]model.EnvVar{"LD_PRELOAD": {Value: "/tmp/x.so"}} }), "env_vars.LD_PRELOAD"},
				"3 docker privileged": {docker("--privileged", "-v", "/:/host", "--pid=host"), "package.runtime_args.0"},
				"3 docker host mount": {docker("-v", "/:/host"), "package.runtime_args.0"},
				"3 docker host net":   {docker("--network", "host"), "package.runtime_args.0"},
				"4 keyfile nkey seed": {npm(func(c *model.McpConfig) {
					c.EnvVars = map[string]model.EnvVar{"K": {KeyfilePath: filepath.Join(dataDir, "nats", "operator.nk")}}
				}), "env_vars.K.keyfile_path"},
				"4 keyfile /etc/shadow": {npm(func(c *model.McpConfig) { c.EnvVars = map[string]model.EnvVar{"K": {KeyfilePath: "/etc/shadow"}} }), "env_vars.K.keyfile_path"},
			} {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				_, err := st.Client.CreateConfig(ctx, tc.cfg, nil)
				cancel()
				var e *apierr.Error
				if !errors.As(err, &e) || e.Code != apierr.Validation || e.Field != tc.field {
					t.Errorf("%s: %v, want VALIDATION_ERROR on %s", attack, err, tc.field)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if cfgs, err := st.Client.ListConfigs(ctx); err != nil || len(cfgs) != 0 {
				t.Fatalf("stored: %v %v", cfgs, err)
			}
			time.Sleep(time.Second)
			if b, err := os.ReadFile(canary); err == nil {
				t.Fatalf("a refused config ran: %s", b)
			}
		})
	}
}

// TestSecretsInURLsAndArgs: configs with a secret in a URL or an argument
// are refused (REST 400, field named), and the secret is nowhere on the bus,
// in the KV files or in the replies.
func TestSecretsInURLsAndArgs(t *testing.T) {
	st, dataDir := startPolicyStack(t, composeRunner())
	nc, err := nats.Connect(st.NATS.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var mu sync.Mutex
	var seen [][]byte
	sub, err := nc.Subscribe(">", func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		h, _ := json.Marshal(m.Header)
		seen = append(seen, append(append([]byte(m.Subject+" "), m.Data...), h...))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(st.Gateway.AdminKeyPath())
	if err != nil {
		t.Fatal(err)
	}
	secrets := []string{"urltoken7Q2", "userinfoPw9X", "argkey5K1", "argtoken3M4", "dockerenv8Z0"}
	for _, tc := range []struct {
		cfg   model.McpConfig
		field string
	}{
		{model.McpConfig{Name: "u1", Transport: model.Transport{Type: model.TransportHTTP, URL: "https://mcp.example.com/mcp?token=" + secrets[0]}}, "transport.url"},
		{model.McpConfig{Name: "u2", Transport: model.Transport{Type: model.TransportHTTP, URL: "https://user:" + secrets[1] + "@mcp.example.com/mcp"}}, "transport.url"},
		{model.McpConfig{Name: "a1", Package: model.Package{Type: model.PackageNPM, Identifier: "pkg", Args: []string{"--api-key=" + secrets[2]}},
			Transport: model.Transport{Type: model.TransportStdio}}, "package.args.0"},
		{model.McpConfig{Name: "a2", Package: model.Package{Type: model.PackageNPM, Identifier: "pkg", Args: []string{"--token", secrets[3]}},
			Transport: model.Transport{Type: model.TransportStdio}}, "package.args.1"},
		{model.McpConfig{Name: "a3", Package: model.Package{Type: model.PackageDocker, Identifier: "alpine", RuntimeArgs: []string{"-e", "API_KEY=" + secrets[4]}},
			Transport: model.Transport{Type: model.TransportStdio}}, "package.runtime_args.0"},
	} {
		body, _ := json.Marshal(model.ConfigCreateRequest{Config: tc.cfg})
		req, _ := http.NewRequest(http.MethodPost, "http://"+st.Gateway.Addr()+"/api/v1/servers", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(key)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		reply, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(reply), tc.field) {
			t.Errorf("%s: %d %s, want 400 naming %s", tc.cfg.Name, resp.StatusCode, reply, tc.field)
		}
		for _, s := range secrets {
			if strings.Contains(string(reply), s) {
				t.Errorf("%s: the reply holds a secret: %s", tc.cfg.Name, reply)
			}
		}
	}
	// A clean save, so that the capture is seen to work.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := st.Client.CreateConfig(ctx, model.McpConfig{Name: "clean",
		Transport: model.Transport{Type: model.TransportHTTP, URL: "https://mcp.example.com/mcp?page=2"}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	for _, m := range seen {
		for _, s := range secrets {
			if bytes.Contains(m, []byte(s)) {
				t.Errorf("on the bus: %s", m)
			}
		}
	}
	saw := false
	for _, m := range seen {
		saw = saw || bytes.Contains(m, []byte("mcp.example.com/mcp?page=2"))
	}
	mu.Unlock()
	if !saw {
		t.Fatal("the capture missed the clean save: is it listening?")
	}
	err = filepath.WalkDir(dataDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil // a file being rewritten
		}
		for _, s := range secrets {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s holds a secret", path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
