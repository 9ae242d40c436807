package serverfile_test

import (
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/serverfile"
)

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// wantErr checks err is a VALIDATION_ERROR on field whose message contains msg.
func wantErr(t *testing.T, err error, field, msg string) *apierr.Error {
	t.Helper()
	var e *apierr.Error
	if !errors.As(err, &e) {
		t.Fatalf("want VALIDATION_ERROR on %q, got %T %v", field, err, err)
	}
	if e.Code != apierr.Validation || e.Field != field || !strings.Contains(e.Message, msg) {
		t.Fatalf("want VALIDATION_ERROR on %q containing %q, got %s on %q: %s", field, msg, e.Code, e.Field, e.Message)
	}
	return e
}

func npm(id string, args ...string) model.Package {
	return model.Package{Type: model.PackageNPM, Identifier: id, Args: args}
}

func binary(id string, args ...string) model.Package {
	return model.Package{Type: model.PackageBinary, Identifier: id, Args: args}
}

var stdio = model.Transport{Type: model.TransportStdio}

// conf is a config as an import leaves it (normalized, enabled).
func conf(name, slug string, p model.Package, t model.Transport, auth string, env map[string]model.EnvVar) model.McpConfig {
	if t.Type == model.TransportHTTP {
		p = model.Package{Type: model.PackageHTTP, Identifier: t.URL}
	}
	return model.McpConfig{Name: name, Slug: slug, Enabled: true, Source: model.Source{Type: model.SourceManual},
		Package: p, Transport: t, AuthType: auth, EnvVars: env}
}

func secretVar(name string) model.EnvVar {
	return model.EnvVar{SecretRef: name, IsSecret: true, Required: true}
}

const claudeToken = "ghp_claudeExampleToken0123456789abcdefAB"

type fixture struct {
	file   string
	format string
	vars   map[string]string
	want   []serverfile.Entry
	// roundVars are the variables a rendered copy needs: the placeholders
	// Render writes for the secrets, with the secret values.
	roundVars map[string]string
}

func fixtures() []fixture {
	pat := "GITHUB_PERSONAL_ACCESS_TOKEN"
	return []fixture{
		{
			file: "claude_desktop_config.json", format: model.FormatMCPServers,
			want: []serverfile.Entry{
				{Config: conf("fetch", "fetch", binary("uvx", "mcp-server-fetch"), stdio, model.AuthNone, nil)},
				{Config: conf("filesystem", "filesystem", npm("@modelcontextprotocol/server-filesystem", "/Users/alice/Desktop", "/Users/alice/Downloads"), stdio, model.AuthNone, nil)},
				{
					Config:  conf("github", "github", npm("@modelcontextprotocol/server-github"), stdio, model.AuthAPIKey, map[string]model.EnvVar{pat: secretVar(pat)}),
					Secrets: model.Credentials{Env: map[string]string{pat: claudeToken}},
				},
				{
					Config: conf("github-docker", "github-docker", model.Package{Type: model.PackageDocker, Identifier: "ghcr.io/github/github-mcp-server"}, stdio, model.AuthAPIKey,
						map[string]model.EnvVar{pat: secretVar(pat), "GITHUB_TOOLSETS": {Value: "repos,issues,pull_requests"}}),
					Secrets: model.Credentials{Env: map[string]string{pat: claudeToken}},
				},
				// Docker with a volume: not what the runner's docker package runs, so the command as written.
				{Config: conf("sqlite", "sqlite", binary("docker", "run", "--rm", "-i", "-v", "mcp-test:/mcp", "mcp/sqlite", "--db-path", "/mcp/test.db"), stdio, model.AuthNone, nil)},
			},
			roundVars: map[string]string{pat: claudeToken},
		},
		{
			file: "cursor_mcp.json", format: model.FormatMCPServers,
			vars: map[string]string{"DOCS_API_TOKEN": "docs-tok-123", "userHome": "/home/alice", "UNUSED": "x"},
			want: []serverfile.Entry{
				{
					Config: conf("docs", "docs", model.Package{}, model.Transport{Type: model.TransportHTTP, URL: "https://mcp.example.com/mcp",
						Headers: map[string]string{"X-Workspace": "acme"}, SecretHeaders: []string{"Authorization"}}, model.AuthAPIKey, nil),
					Secrets: model.Credentials{Headers: map[string]string{"Authorization": "Bearer docs-tok-123"}},
				},
				{Config: conf("linear", "linear", model.Package{}, model.Transport{Type: model.TransportHTTP, URL: "https://mcp.linear.app/mcp"}, model.AuthNone, nil)},
				{Config: conf("memory", "memory", npm("@modelcontextprotocol/server-memory"), stdio, model.AuthNone,
					map[string]model.EnvVar{"MEMORY_FILE_PATH": {Value: "/home/alice/.cursor/memory.json"}})},
			},
			roundVars: map[string]string{"AUTHORIZATION": "Bearer docs-tok-123"},
		},
		{
			file: "vscode_mcp.json", format: model.FormatMCPServers,
			vars: map[string]string{"perplexity-key": "pplx-secret-1", "pg-url": "postgres://app:pw@db/app"},
			want: []serverfile.Entry{
				{
					Config: conf("Perplexity", "perplexity", npm("server-perplexity-ask"), stdio, model.AuthAPIKey,
						map[string]model.EnvVar{"PERPLEXITY_API_KEY": secretVar("PERPLEXITY_API_KEY")}),
					Secrets: model.Credentials{Env: map[string]string{"PERPLEXITY_API_KEY": "pplx-secret-1"}},
				},
				{Config: conf("fetch", "fetch", binary("uvx", "mcp-server-fetch"), stdio, model.AuthNone, nil)},
				{Config: conf("github", "github", model.Package{}, model.Transport{Type: model.TransportHTTP, URL: "https://api.githubcopilot.com/mcp/"}, model.AuthNone, nil)},
				{
					// DATABASE_URL does not look secret; the password input makes it one.
					Config: conf("postgres", "postgres", npm("@example/postgres-mcp"), stdio, model.AuthAPIKey,
						map[string]model.EnvVar{"DATABASE_URL": secretVar("DATABASE_URL")}),
					Secrets: model.Credentials{Env: map[string]string{"DATABASE_URL": "postgres://app:pw@db/app"}},
				},
			},
			roundVars: map[string]string{"PERPLEXITY_API_KEY": "pplx-secret-1", "DATABASE_URL_SECRET": "postgres://app:pw@db/app"},
		},
		{
			file: "mcp.yaml", format: model.FormatMCPYAML,
			vars: map[string]string{"GITHUB_TOKEN": "ghp_yamlToken", "API_TOKEN": "api-tok-9"},
			want: []serverfile.Entry{
				{
					Config: conf("custom-api", "custom-api", model.Package{}, model.Transport{Type: model.TransportHTTP, URL: "https://mcp.example.com/api",
						SecretHeaders: []string{"Authorization"}}, model.AuthAPIKey, nil),
					Secrets: model.Credentials{Headers: map[string]string{"Authorization": "Bearer api-tok-9"}},
				},
				{Config: conf("filesystem", "filesystem", npm("@modelcontextprotocol/server-filesystem", "/workspace"), stdio, model.AuthNone, nil)},
				{
					Config:  conf("github", "github", npm("@modelcontextprotocol/server-github"), stdio, model.AuthAPIKey, map[string]model.EnvVar{"GITHUB_TOKEN": secretVar("GITHUB_TOKEN")}),
					Secrets: model.Credentials{Env: map[string]string{"GITHUB_TOKEN": "ghp_yamlToken"}},
				},
				// OAuth: no token comes with the file, so no secrets (the user sets the token later).
				{Config: conf("slack", "slack", npm("@modelcontextprotocol/server-slack"), stdio, model.AuthOAuth, nil)},
			},
			roundVars: map[string]string{"GITHUB_TOKEN": "ghp_yamlToken", "AUTHORIZATION": "Bearer api-tok-9"},
		},
	}
}

// secretValues lists every secret of the entries.
func secretValues(entries []serverfile.Entry) []string {
	var out []string
	for _, e := range entries {
		out = append(out, slices.Collect(maps.Values(e.Secrets.Env))...)
		out = append(out, slices.Collect(maps.Values(e.Secrets.Headers))...)
	}
	return out
}

// noSecretIn fails if any secret value (or its distinctive part) shows in data.
func noSecretIn(t *testing.T, what string, data []byte, secrets []string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(string(data), s) || strings.Contains(string(data), strings.TrimPrefix(s, "Bearer ")) {
			t.Errorf("%s contains the secret %q:\n%s", what, s, data)
		}
	}
}

func TestParseFixtures(t *testing.T) {
	for _, fx := range fixtures() {
		t.Run(fx.file, func(t *testing.T) {
			content := readFile(t, fx.file)
			format, err := serverfile.Detect(content)
			if err != nil || format != fx.format {
				t.Fatalf("Detect = %q, %v; want %q", format, err, fx.format)
			}
			got, err := serverfile.Parse("", content, fx.vars)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, fx.want) {
				t.Fatalf("Parse:\n got %s\nwant %s", dump(got), dump(fx.want))
			}
			explicit, err := serverfile.Parse(fx.format, content, fx.vars)
			if err != nil || !reflect.DeepEqual(explicit, got) {
				t.Fatalf("Parse with the format given = %v, %v", dump(explicit), err)
			}
			secrets := secretValues(got)
			for _, e := range got {
				if err := e.Config.Validate(); err != nil {
					t.Errorf("%s does not validate: %v", e.Config.Name, err)
				}
				data, _ := json.Marshal(e.Config)
				noSecretIn(t, "config "+e.Config.Name, data, secrets)
			}
		})
	}
}

func dump(v any) string {
	b, _ := json.MarshalIndent(v, "", " ")
	return string(b)
}

// The configs of every fixture, rendered in every format and parsed back
// with the placeholder variables set, are the same configs with the same
// secrets; no rendered file holds a secret.
func TestRoundTrip(t *testing.T) {
	for _, fx := range fixtures() {
		for _, format := range []string{model.FormatServers, model.FormatMCPServers, model.FormatMCPYAML} {
			t.Run(fx.file+"/"+format, func(t *testing.T) {
				var configs []model.McpConfig
				for _, e := range fx.want {
					configs = append(configs, e.Config)
				}
				before := dump(configs)
				out, err := serverfile.Render(format, configs)
				if err != nil {
					t.Fatal(err)
				}
				if dump(configs) != before {
					t.Fatal("Render changed its input")
				}
				noSecretIn(t, "rendered file", out, secretValues(fx.want))
				if got, err := serverfile.Detect(out); err != nil || got != format {
					t.Fatalf("Detect(rendered) = %q, %v:\n%s", got, err, out)
				}
				refs := serverfile.References(out)
				slices.Sort(refs)
				if want := slices.Sorted(maps.Keys(fx.roundVars)); !slices.Equal(refs, want) {
					t.Fatalf("rendered file refers to %v, want %v:\n%s", refs, want, out)
				}
				back, err := serverfile.Parse(format, out, fx.roundVars)
				if err != nil {
					t.Fatalf("%v\n%s", err, out)
				}
				want := slices.Clone(fx.want)
				for i := range want {
					// mcpServers has no place for OAuth: the server comes back as none.
					if format == model.FormatMCPServers && want[i].Config.AuthType == model.AuthOAuth {
						want[i].Config.AuthType = model.AuthNone
					}
				}
				if !reflect.DeepEqual(back, want) {
					t.Fatalf("round trip:\n got %s\nwant %s\nfile:\n%s", dump(back), dump(want), out)
				}
				// Without the variables the rendered file does not import.
				if len(fx.roundVars) > 0 {
					if _, err := serverfile.Parse(format, out, nil); err == nil {
						t.Fatal("parsed without the secrets' variables")
					} else {
						wantErr(t, err, apierr.From(err).Field, "undefined variable ${")
					}
				}
			})
		}
	}
}

// The exact shapes written, checked once by eye against the clients' docs.
func TestRenderShapes(t *testing.T) {
	configs := []model.McpConfig{
		{Name: "Remote Docs", Slug: "docs", Enabled: true, AuthType: model.AuthAPIKey,
			Package:   model.Package{Type: model.PackageHTTP, Identifier: "https://docs.example.com/mcp"},
			Transport: model.Transport{Type: model.TransportHTTP, URL: "https://docs.example.com/mcp", Headers: map[string]string{"X-Team": "a"}, SecretHeaders: []string{"Authorization"}}},
		{Name: "github", Slug: "github", Enabled: true, AuthType: model.AuthAPIKey, ID: "9d0f6b5e-1c1a-4c53-9a57-3f1c8f1e2b11", Revision: 7,
			Package:   model.Package{Type: model.PackageDocker, Identifier: "ghcr.io/github/github-mcp-server", Args: []string{"stdio"}},
			Transport: stdio,
			EnvVars: map[string]model.EnvVar{"GITHUB_PERSONAL_ACCESS_TOKEN": secretVar("GITHUB_PERSONAL_ACCESS_TOKEN"),
				"GITHUB_TOOLSETS": {Value: "repos"}, "DB_URL": {SecretRef: "DB_URL", IsSecret: true}}},
		{Name: "fs", Slug: "fs", Enabled: false, Package: npm("@modelcontextprotocol/server-filesystem", "/tmp/${x}"), Transport: stdio},
	}
	out, err := serverfile.Render(model.FormatMCPServers, configs)
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "mcpServers": {
    "Remote Docs": {
      "url": "https://docs.example.com/mcp",
      "headers": {
        "Authorization": "${AUTHORIZATION}",
        "X-Team": "a"
      },
      "type": "http"
    },
    "fs": {
      "command": "npx",
      "args": [
        "-y",
        "@modelcontextprotocol/server-filesystem",
        "/tmp/$${x}"
      ],
      "disabled": true
    },
    "github": {
      "command": "docker",
      "args": [
        "run",
        "-i",
        "--rm",
        "-e",
        "DB_URL",
        "-e",
        "GITHUB_PERSONAL_ACCESS_TOKEN",
        "-e",
        "GITHUB_TOOLSETS",
        "ghcr.io/github/github-mcp-server",
        "stdio"
      ],
      "env": {
        "DB_URL": "${DB_URL_SECRET:-}",
        "GITHUB_PERSONAL_ACCESS_TOKEN": "${GITHUB_PERSONAL_ACCESS_TOKEN}",
        "GITHUB_TOOLSETS": "repos"
      }
    }
  }
}
`
	if string(out) != want {
		t.Errorf("mcpServers:\n%s\nwant:\n%s", out, want)
	}

	out, err = serverfile.Render(model.FormatMCPYAML, configs)
	if err != nil {
		t.Fatal(err)
	}
	want = `servers:
  Remote Docs:
    transport:
      type: http
      url: https://docs.example.com/mcp
      headers:
        Authorization: ${AUTHORIZATION}
        X-Team: a
    enabled: true
  fs:
    transport:
      type: stdio
      command: npx
      args:
        - -y
        - '@modelcontextprotocol/server-filesystem'
        - /tmp/$${x}
    enabled: false
  github:
    transport:
      type: stdio
      command: docker
      args:
        - run
        - -i
        - --rm
        - -e
        - DB_URL
        - -e
        - GITHUB_PERSONAL_ACCESS_TOKEN
        - -e
        - GITHUB_TOOLSETS
        - ghcr.io/github/github-mcp-server
        - stdio
    env:
      DB_URL: ${DB_URL_SECRET:-}
      GITHUB_PERSONAL_ACCESS_TOKEN: ${GITHUB_PERSONAL_ACCESS_TOKEN}
      GITHUB_TOOLSETS: repos
    enabled: true
`
	if string(out) != want {
		t.Errorf("mcp.yaml:\n%s\nwant:\n%s", out, want)
	}

	out, err = serverfile.Render(model.FormatServers, configs)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Servers []map[string]any `json:"servers"`
	}
	if err := json.Unmarshal(out, &file); err != nil || len(file.Servers) != 3 {
		t.Fatalf("servers file %v:\n%s", err, out)
	}
	for _, s := range file.Servers {
		for _, k := range []string{"id", "revision", "created_at", "updated_at"} {
			if _, ok := s[k]; ok {
				t.Errorf("exported %s has %s", s["name"], k)
			}
		}
	}
	for _, part := range []string{`"value": "${GITHUB_PERSONAL_ACCESS_TOKEN}"`, `"value": "${DB_URL_SECRET:-}"`, `"Authorization": "${AUTHORIZATION}"`,
		`"secret_headers": [`, `"/tmp/$${x}"`, `"name": "Remote Docs",`} {
		if !strings.Contains(string(out), part) {
			t.Errorf("servers file lacks %s:\n%s", part, out)
		}
	}
	// Sorted by name: "Remote Docs" < "fs" < "github" (byte order).
	if i, j, k := strings.Index(string(out), `"Remote Docs"`), strings.Index(string(out), `"fs"`), strings.Index(string(out), `"github"`); !(i < j && j < k) {
		t.Errorf("not sorted by name:\n%s", out)
	}
	// The optional secret and the escaped ${ come back as they were.
	back, err := serverfile.Parse(model.FormatServers, out, map[string]string{"GITHUB_PERSONAL_ACCESS_TOKEN": "t", "AUTHORIZATION": "Bearer b"})
	if err != nil {
		t.Fatal(err)
	}
	// Sorted by name: Remote Docs, fs, github.
	if v := back[2].Config.EnvVars["DB_URL"]; v != (model.EnvVar{SecretRef: "DB_URL", IsSecret: true}) {
		t.Errorf("optional secret came back as %+v", v)
	}
	if got := back[1].Config.Package.Args; !slices.Equal(got, []string{"/tmp/${x}"}) {
		t.Errorf("escaped arg came back as %q", got)
	}
	if back[2].Config.ID != "" || back[2].Config.Revision != 0 {
		t.Errorf("id/revision exported: %+v", back[2].Config)
	}
}

// Configs written before imports moved secrets out (configstore keeps an
// Authorization header, a LooksSecret env var with a plain value): an export
// still never writes the values.
func TestRenderNeverWritesSecrets(t *testing.T) {
	configs := []model.McpConfig{
		{Name: "legacy", Slug: "legacy", Transport: model.Transport{Type: model.TransportHTTP, URL: "https://h.example/mcp",
			Headers: map[string]string{"Authorization": "Bearer legacy-secret-1"}}},
		{Name: "env", Slug: "env", Package: npm("p"), Transport: stdio,
			EnvVars: map[string]model.EnvVar{"OPENAI_API_KEY": {Value: "sk-legacy-2"}, "KEYFILE_TOKEN": {KeyfilePath: "/run/secrets/tok"}}},
	}
	for _, format := range []string{model.FormatServers, model.FormatMCPServers, model.FormatMCPYAML} {
		out, err := serverfile.Render(format, configs)
		if err != nil {
			t.Fatal(err)
		}
		noSecretIn(t, format, out, []string{"legacy-secret-1", "sk-legacy-2"})
		if !strings.Contains(string(out), "${AUTHORIZATION}") || !strings.Contains(string(out), "${OPENAI_API_KEY}") {
			t.Errorf("%s: placeholders missing:\n%s", format, out)
		}
		// A keyfile path is no secret: the servers file keeps it; the client
		// formats cannot say "keyfile" and ask for the value instead.
		if format == model.FormatServers {
			if !strings.Contains(string(out), "/run/secrets/tok") {
				t.Errorf("keyfile path lost:\n%s", out)
			}
		} else if !strings.Contains(string(out), "${KEYFILE_TOKEN}") {
			t.Errorf("%s: keyfile var not a placeholder:\n%s", format, out)
		}
	}
	if _, err := serverfile.Render("toml", configs); err == nil {
		t.Fatal("unknown format rendered")
	} else {
		wantErr(t, err, "format", "unknown format")
	}
	bad := []model.McpConfig{{Name: "x", Slug: "x", Transport: stdio, Package: model.Package{Type: "pip", Identifier: "x"}}}
	if _, err := serverfile.Render(model.FormatMCPServers, bad); err == nil {
		t.Fatal("unknown package type rendered")
	}
	// An empty list renders to files that import as nothing.
	for _, format := range []string{model.FormatServers, model.FormatMCPServers, model.FormatMCPYAML} {
		out, err := serverfile.Render(format, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := serverfile.Parse(format, out, nil)
		if err != nil || len(got) != 0 {
			t.Errorf("%s empty: %s -> %v, %v", format, out, got, err)
		}
	}
}

func TestDetect(t *testing.T) {
	cases := map[string]string{
		`{"servers": []}`:                  model.FormatServers,
		"servers:\n  - name: a\n":          model.FormatServers,
		"servers:\n":                       model.FormatServers,
		`{"mcpServers": {}}`:               model.FormatMCPServers,
		"mcpServers:\n  a: {command: x}\n": model.FormatMCPServers,
		`{"servers": {"a": {"command": "x"}}, "inputs": []}`: model.FormatMCPServers,
		`{"servers": {}}`: model.FormatMCPServers,
		"servers: {}\n":   model.FormatMCPYAML,
		"servers:\n  a:\n    transport: {type: stdio, command: x}\n": model.FormatMCPYAML,
		// Claude Desktop keeps other settings beside its servers.
		`{"globalShortcut": "", "mcpServers": {"a": {"command": "x"}}}`: model.FormatMCPServers,
	}
	for content, want := range cases {
		got, err := serverfile.Detect([]byte(content))
		if err != nil || got != want {
			t.Errorf("Detect(%q) = %q, %v; want %q", content, got, err, want)
		}
	}
	bad := map[string]string{
		"":                       "content is empty",
		"  \n# only a comment\n": "content is empty",
		"null":                   "content is empty",
		`["servers"]`:            "expected a mapping",
		`{"tools": []}`:          "unknown format",
		"servers: 3\n":           "servers must be a list",
		"\xff\xfe":               "not UTF-8",
	}
	for content, msg := range bad {
		_, err := serverfile.Detect([]byte(content))
		if err == nil {
			t.Errorf("Detect(%q) succeeded", content)
			continue
		}
		if e := apierr.From(err); e.Code != apierr.Validation || !strings.Contains(e.Message, msg) {
			t.Errorf("Detect(%q) = %v, want %q", content, err, msg)
		}
	}
}

func TestVariables(t *testing.T) {
	seed := readFile(t, "mcp.yaml")
	// Each reference with no value and no default names its field.
	_, err := serverfile.Parse("", seed, map[string]string{"API_TOKEN": "a"})
	wantErr(t, err, "servers.github.env.GITHUB_TOKEN", "undefined variable ${GITHUB_TOKEN}")
	_, err = serverfile.Parse("", seed, map[string]string{"GITHUB_TOKEN": "g"})
	wantErr(t, err, "servers.custom-api.transport.headers.Authorization", "undefined variable ${API_TOKEN}")
	// The oauth block is not imported, so its variables are not needed.
	if _, err := serverfile.Parse("", seed, map[string]string{"GITHUB_TOKEN": "g", "API_TOKEN": "a"}); err != nil {
		t.Fatal(err)
	}

	file := `{"mcpServers": {"s": {"command": "npx", "args": ["-y", "pkg", "--root", "${ROOT:-/srv/data}", "${HOME}/x", "cost: $5", "$${NOT_A_VAR}"],
	  "env": {"LOG_LEVEL": "${LOG_LEVEL:-info}", "GITHUB_TOKEN": "${GITHUB_TOKEN:-}", "REGION": "${env:REGION}"}}}}`
	cases := []struct {
		name string
		vars map[string]string
		args []string
		env  map[string]model.EnvVar
		sec  map[string]string
	}{
		{"defaults", map[string]string{"HOME": "/home/a", "REGION": "eu"},
			[]string{"--root", "/srv/data", "/home/a/x", "cost: $5", "${NOT_A_VAR}"},
			map[string]model.EnvVar{"LOG_LEVEL": {Value: "info"}, "GITHUB_TOKEN": secretVar("GITHUB_TOKEN"), "REGION": {Value: "eu"}}, nil},
		{"empty takes the default", map[string]string{"HOME": "", "ROOT": "", "LOG_LEVEL": "", "REGION": ""},
			[]string{"--root", "/srv/data", "/x", "cost: $5", "${NOT_A_VAR}"},
			map[string]model.EnvVar{"LOG_LEVEL": {Value: "info"}, "GITHUB_TOKEN": secretVar("GITHUB_TOKEN"), "REGION": {}}, nil},
		{"values", map[string]string{"HOME": "/h", "ROOT": "/r", "LOG_LEVEL": "debug", "GITHUB_TOKEN": "ghp_1", "REGION": "us"},
			[]string{"--root", "/r", "/h/x", "cost: $5", "${NOT_A_VAR}"},
			map[string]model.EnvVar{"LOG_LEVEL": {Value: "debug"}, "GITHUB_TOKEN": secretVar("GITHUB_TOKEN"), "REGION": {Value: "us"}},
			map[string]string{"GITHUB_TOKEN": "ghp_1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := serverfile.Parse("", []byte(file), tc.vars)
			if err != nil {
				t.Fatal(err)
			}
			c := got[0].Config
			if !slices.Equal(c.Package.Args, tc.args) || c.Package.Identifier != "pkg" {
				t.Errorf("package = %+v, want args %q", c.Package, tc.args)
			}
			if !reflect.DeepEqual(c.EnvVars, tc.env) || !maps.Equal(got[0].Secrets.Env, tc.sec) {
				t.Errorf("env = %+v secrets %v; want %+v %v", c.EnvVars, got[0].Secrets.Env, tc.env, tc.sec)
			}
			// An empty secret is a required secret with no value: the server
			// waits for one (the runner refuses to start it until then).
			if c.AuthType != model.AuthAPIKey {
				t.Errorf("auth = %s", c.AuthType)
			}
		})
	}
	_, err = serverfile.Parse("", []byte(file), map[string]string{"REGION": "x"})
	wantErr(t, err, "mcpServers.s.args[4]", "undefined variable ${HOME}")

	malformed := map[string]string{
		`{"mcpServers": {"s": {"command": "x", "args": ["${UNCLOSED"]}}}`:       "without a closing }",
		`{"mcpServers": {"s": {"command": "x", "args": ["${not a name}"]}}}`:    "unsupported variable reference",
		`{"mcpServers": {"s": {"command": "x", "args": ["${config:editor}"]}}}`: "unsupported variable reference",
		`{"mcpServers": {"s": {"command": "x", "args": ["${A:-${B}}"]}}}`:       "unsupported variable reference",
		`{"mcpServers": {"s": {"command": "x", "env": {"P": "p@ss${"}}}}`:       "without a closing }",
	}
	for content, msg := range malformed {
		_, err := serverfile.Parse("", []byte(content), map[string]string{"A": "a", "B": "b"})
		e := apierr.From(err)
		if err == nil || e.Code != apierr.Validation || !strings.Contains(e.Message, msg) || !strings.HasPrefix(e.Field, "mcpServers.s.") {
			t.Errorf("%s: %v", content, err)
		}
		if err != nil && strings.Contains(e.Message, "p@ss") {
			t.Errorf("error quotes the value: %v", err)
		}
	}
}

// mcpbus's own settings (MCPBUS_*) hold its secrets (the Vault secret id,
// the credential service's curve seed): no config moves them into a
// server, whatever name or field carries the reference, defined or not.
func TestOwnSettingsAreNoVariables(t *testing.T) {
	vars := map[string]string{"MCPBUS_VAULT_SECRET_ID": "s.sekret", "MCPBUS_DATA_DIR": "/var/lib/mcpbus", "mcpbus_x": "y"}
	for _, tc := range []struct{ content, field string }{
		{`{"mcpServers": {"s": {"command": "x", "env": {"A": "${MCPBUS_VAULT_SECRET_ID}"}}}}`, "mcpServers.s.env.A"},
		{`{"mcpServers": {"s": {"command": "x", "args": ["--dir", "${MCPBUS_DATA_DIR}"]}}}`, "mcpServers.s.args[1]"},
		{`{"mcpServers": {"s": {"command": "x", "args": ["${env:mcpbus_x}"]}}}`, "mcpServers.s.args[0]"},
		{`{"mcpServers": {"s": {"command": "x", "args": ["${MCPBUS_UNSET:-fallback}"]}}}`, "mcpServers.s.args[0]"},
	} {
		_, err := serverfile.Parse("", []byte(tc.content), vars)
		if err == nil {
			t.Errorf("%s: taken", tc.content)
			continue
		}
		e := apierr.From(err)
		if e.Code != apierr.Validation || e.Field != tc.field || !strings.Contains(e.Message, "mcpbus's own settings") {
			t.Errorf("%s: %v (field %q)", tc.content, err, e.Field)
		}
		if strings.Contains(e.Message, "sekret") || strings.Contains(e.Message, "/var/lib") {
			t.Errorf("the error quotes the value: %v", err)
		}
	}
}

func TestReferences(t *testing.T) {
	if got := serverfile.References(readFile(t, "mcp.yaml")); !slices.Equal(got, []string{"GITHUB_TOKEN", "API_TOKEN"}) {
		t.Errorf("mcp.yaml refs = %q (the oauth block is not read)", got)
	}
	if got := serverfile.References(readFile(t, "cursor_mcp.json")); !slices.Equal(got, []string{"DOCS_API_TOKEN", "userHome"}) {
		t.Errorf("cursor refs = %q", got)
	}
	if got := serverfile.References(readFile(t, "vscode_mcp.json")); !slices.Equal(got, []string{"perplexity-key", "pg-url"}) {
		t.Errorf("vscode refs = %q", got)
	}
	if got := serverfile.References(readFile(t, "claude_desktop_config.json")); len(got) != 0 {
		t.Errorf("claude refs = %q", got)
	}
	yaml := "# set ${IN_A_COMMENT} first\nservers:\n  - name: a\n    package: {type: npm, identifier: p, args: [\"${B}\", \"${A:-x}/${B}\", \"$${LITERAL}\"]}\n    transport: {type: stdio}\n    env_vars: {K: {value: \"${env:C}\"}}\n"
	if got := serverfile.References([]byte(yaml)); !slices.Equal(got, []string{"B", "A", "C"}) {
		t.Errorf("refs = %q", got)
	}
	// Unreadable content: a plain scan of the text.
	if got := serverfile.References([]byte("servers: [\n  ${X} ${Y} ${X}")); !slices.Equal(got, []string{"X", "Y"}) {
		t.Errorf("refs of broken content = %q", got)
	}
}

func TestSyntaxErrors(t *testing.T) {
	cases := []struct{ name, content, msg string }{
		{"json missing comma", "{\n  \"mcpServers\": {\n    \"a\": {\"command\": \"x\"}\n    \"b\": {}\n  }\n}\n", "line 4, column 5"},
		{"json truncated", "{\n  \"mcpServers\": {\n    \"a\": {\"command\": ", "line 3, column"},
		{"json garbage after", `{"servers": []} x`, "line 1, column 17"},
		{"json wide characters", "{\n  \"mcpServers\": {\"é\": {\"command\": \"x\",}} ]\n}", "line 2, column 39"},
		{"yaml bad indent", "servers:\n  - name: a\n   bad: [\n", "line 3: did not find expected '-' indicator"},
		{"yaml stray item on line 3", "servers:\n  - name: a\n- name: b\n  enabled: true\n", "line 3: did not find expected key"},
		{"yaml stray item on line 4", "# servers\nservers:\n  - name: a\n- name: b\n", "line 4: did not find expected key"},
		{"yaml unclosed list", "servers:\n  - name: a\n    package: {type: npm, args: [a, b\n  - name: b\n", "line 4: did not find expected ',' or ']'"},
		{"yaml tab", "servers:\n\t- name: a\n", "line 2: found character"},
		{"yaml unclosed", "servers:\n  a:\n    transport: {type: stdio\n", "line 3"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := serverfile.Parse("", []byte(tc.content), nil)
			wantErr(t, err, "content", tc.msg)
			_, err = serverfile.Detect([]byte(tc.content))
			wantErr(t, err, "content", tc.msg)
		})
	}
	// Duplicate keys would silently drop a server.
	_, err := serverfile.Parse("", []byte(`{"mcpServers": {"a": {"command": "x"}, "a": {"command": "y"}}}`), nil)
	wantErr(t, err, "mcpServers.a", `duplicate key "a"`)
	_, err = serverfile.Parse("", []byte("servers:\n  a:\n    transport: {type: stdio, command: x}\n  a:\n    transport: {type: stdio, command: y}\n"), nil)
	wantErr(t, err, "content", `key "a" already set`)
	// So would keys that differ in YAML but become one in JSON (1 and "1",
	// true and "true", 1.0 and 1): named with the later one's line.
	for _, c := range []struct{ keys, msg string }{
		{"      1: one\n      \"1\": uno\n", `line 6: the keys 1 (line 5) and "1" both become the key "1"`},
		{"      'true': t\n      true: t\n", `line 6: the keys "true" (line 5) and true both become the key "true"`},
		{"      1.0: a\n      B: b\n      1: c\n", `line 7: the keys 1.0 (line 5) and 1 both become the key "1"`},
	} {
		_, err = serverfile.Parse("", []byte("servers:\n  a:\n    transport: {type: stdio, command: x}\n    env:\n"+c.keys), nil)
		wantErr(t, err, "content", c.msg)
	}
	// Keys that stay apart in JSON are fine.
	if got, err := serverfile.Parse("", []byte("servers:\n  a:\n    transport: {type: stdio, command: x}\n    env:\n      1: one\n      \"01\": two\n      1.5: three\n"), nil); err != nil || len(got[0].Config.EnvVars) != 3 {
		t.Fatalf("distinct keys: %v %v", got, err)
	}
	// Names that differ but make one slug: the second is named where it is.
	_, err = serverfile.Parse("", []byte(`{"mcpServers": {"my server": {"command": "x"}, "my-server": {"command": "y"}}}`), nil)
	wantErr(t, err, "mcpServers.my-server", `servers "my server" and "my-server" both get the slug my-server`)
	_, err = serverfile.Parse("", []byte("servers:\n  GitHub:\n    transport: {type: stdio, command: x}\n  github:\n    transport: {type: stdio, command: y}\n"), nil)
	wantErr(t, err, "servers.github", "both get the slug github")
	// Aliases that copy a large value many times are refused before they
	// are expanded; a few copies of a small one are fine.
	big := "a: &a " + strings.Repeat("x", 1<<20) + "\nservers: [" + strings.TrimSuffix(strings.Repeat("*a, ", 64), ", ") + "]\n"
	_, err = serverfile.Parse("", []byte(big), nil)
	wantErr(t, err, "content", "its aliases (*name) expand it to more than 8 MiB")
	shared := "servers:\n  a:\n    transport: {type: stdio, command: x}\n    env: &env {A: '1'}\n  b:\n    transport: {type: stdio, command: y}\n    env: *env\n"
	if got, err := serverfile.Parse("", []byte(shared), nil); err != nil || len(got) != 2 || got[1].Config.EnvVars["A"].Value != "1" {
		t.Fatalf("shared env: %v %v", got, err)
	}
	// So would a second YAML document (only the first is converted).
	_, err = serverfile.Parse("", []byte("servers:\n  a:\n    transport: {type: stdio, command: x}\n---\nservers:\n  b:\n    transport: {type: stdio, command: y}\n"), nil)
	wantErr(t, err, "content", "a second document (after ---) at line 5")
	_, err = serverfile.Parse("", []byte("servers:\n  a:\n    transport: {type: stdio, command: x}\n---\nservers: [\n"), nil)
	wantErr(t, err, "content", "a second document (after ---) at line 5: did not find expected node content")
	// A document marker before the first, or an empty document after it, is no second one.
	for _, content := range []string{"---\nservers:\n  a:\n    transport: {type: stdio, command: x}\n", "servers:\n  a:\n    transport: {type: stdio, command: x}\n---\n", "servers:\n  a:\n    transport: {type: stdio, command: x}\n...\n---\n~\n"} {
		if got, err := serverfile.Parse("", []byte(content), nil); err != nil || len(got) != 1 {
			t.Errorf("%q: %v %v", content, got, err)
		}
	}
	// VS Code's comments and trailing commas are fine.
	got, err := serverfile.Parse("", []byte("// my servers\n{\n // comment\n \"servers\": {\"a\": {\"command\": \"x\",},}, /* more */\n}"), nil)
	if err != nil || len(got) != 1 || got[0].Config.Package.Identifier != "x" {
		t.Fatalf("JSONC: %v %v", got, err)
	}
}

func TestTransportRules(t *testing.T) {
	cases := []struct{ name, content, field, msg string }{
		{"sse type", `{"mcpServers": {"old": {"type": "sse", "url": "https://h.example/sse"}}}`, "mcpServers.old.type", "SSE transport is not supported"},
		{"sse in vscode", `{"servers": {"old": {"type": "sse", "url": "https://h.example/sse"}}}`, "servers.old.type", "SSE transport is not supported"},
		{"sse in mcp.yaml", "servers:\n  old:\n    transport: {type: sse, url: 'https://h.example/sse'}\n", "servers.old.transport.type", "SSE transport is not supported"},
		{"unknown type", `{"mcpServers": {"a": {"type": "websocket", "url": "wss://h"}}}`, "mcpServers.a.type", `unknown transport type "websocket"`},
		{"command and url", `{"mcpServers": {"a": {"command": "x", "url": "https://h.example"}}}`, "mcpServers.a.url", "has no url"},
		{"http with command", `{"mcpServers": {"a": {"type": "http", "command": "x", "url": "https://h.example"}}}`, "mcpServers.a.command", "has no command"},
		{"http without url", `{"mcpServers": {"a": {"type": "http"}}}`, "mcpServers.a.url", "url is required"},
		{"no command", `{"mcpServers": {"a": {"args": ["x"]}}}`, "mcpServers.a.command", "command is required"},
		{"headers on stdio", `{"mcpServers": {"a": {"command": "x", "headers": {"A": "b"}}}}`, "mcpServers.a.headers", "only to a url server"},
		{"env on http", `{"mcpServers": {"a": {"url": "https://h.example", "env": {"A": "b"}}}}`, "mcpServers.a.env", "only to a server started from a command"},
		{"bad url", `{"mcpServers": {"a": {"url": "ftp://h.example/x"}}}`, "mcpServers.a.url", "An http transport needs an http(s) URL"},
		{"yaml bad url", "servers:\n  a:\n    transport: {type: http, url: 'h.example'}\n", "servers.a.transport.url", "An http transport needs an http(s) URL"},
		{"command is a flag", `{"mcpServers": {"a": {"command": "-x"}}}`, "mcpServers.a.command", "Package identifier is not valid"},
		{"bad env name", `{"mcpServers": {"a": {"command": "x", "env": {"A=B": "c"}}}}`, "mcpServers.a.env", "contain no '='"},
		{"bad header name", `{"mcpServers": {"a": {"url": "https://h.example", "headers": {"X Bad": "v"}}}}`, "mcpServers.a.headers.X Bad", "not a valid HTTP header name"},
		{"bad header value", `{"mcpServers": {"a": {"url": "https://h.example", "headers": {"Authorization": "Bearer a\r\nX-Injected: 1"}}}}`, "mcpServers.a.headers.Authorization", "no line breaks"},
		{"native bad header", `{"servers": [{"name": "a", "transport": {"type": "http", "url": "https://h.example", "headers": {"A:B": "v"}}}]}`, "servers[0].transport.headers.A:B", "not a valid HTTP header name"},
		{"yaml missing transport", "servers:\n  a:\n    env: {A: b}\n", "servers.a.transport", "transport is required"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := serverfile.Parse("", []byte(tc.content), nil)
			if err == nil {
				t.Fatalf("parsed %s", dump(got))
			}
			wantErr(t, err, tc.field, tc.msg)
		})
	}
	// Streamable HTTP under its other names; a url alone is HTTP too.
	for _, typ := range []string{"http", "streamable-http", "streamableHttp", ""} {
		content := `{"mcpServers": {"r": {"url": "https://h.example/mcp", "type": "` + typ + `"}}}`
		if typ == "" {
			content = `{"mcpServers": {"r": {"url": "https://h.example/mcp"}}}`
		}
		got, err := serverfile.Parse("", []byte(content), nil)
		if err != nil || got[0].Config.Transport.Type != model.TransportHTTP || got[0].Config.Package.Type != model.PackageHTTP {
			t.Errorf("type %q: %v %v", typ, got, err)
		}
	}
}

func TestPackageMapping(t *testing.T) {
	cases := []struct {
		name    string
		command string
		args    []string
		env     map[string]string
		want    model.Package
	}{
		{"npx -y", "npx", []string{"-y", "@scope/pkg@1.2.3", "--flag", "v"}, nil, npm("@scope/pkg@1.2.3", "--flag", "v")},
		{"npx --yes", "npx", []string{"--yes", "pkg"}, nil, npm("pkg")},
		{"npx without -y", "npx", []string{"pkg", "-y"}, nil, npm("pkg", "-y")},
		{"npx other flag", "npx", []string{"-y", "--registry", "https://r.example", "pkg"}, nil, binary("npx", "-y", "--registry", "https://r.example", "pkg")},
		{"npx alone", "npx", []string{"-y"}, nil, binary("npx", "-y")},
		{"docker", "docker", []string{"run", "--rm", "-i", "--init", "-t", "mcp/time"}, nil, model.Package{Type: model.PackageDocker, Identifier: "mcp/time"}},
		{"docker env by name", "docker", []string{"run", "-i", "--rm", "-e", "A", "--env", "B", "--env=C", "img:1", "serve", "-v"},
			map[string]string{"A": "1", "B": "2", "C": "3"}, model.Package{Type: model.PackageDocker, Identifier: "img:1", Args: []string{"serve", "-v"}}},
		{"docker env value", "docker", []string{"run", "-i", "-e", "LOG=debug", "img"}, map[string]string{"LOG": "x"}, binary("docker", "run", "-i", "-e", "LOG=debug", "img")},
		{"docker env not in env", "docker", []string{"run", "-i", "-e", "HOME", "img"}, nil, binary("docker", "run", "-i", "-e", "HOME", "img")},
		{"docker network", "docker", []string{"run", "-i", "--network", "host", "img"}, nil, binary("docker", "run", "-i", "--network", "host", "img")},
		{"docker no image", "docker", []string{"run", "-i", "--rm"}, nil, binary("docker", "run", "-i", "--rm")},
		{"docker exec", "docker", []string{"exec", "-i", "c", "srv"}, nil, binary("docker", "exec", "-i", "c", "srv")},
		{"uvx", "uvx", []string{"mcp-server-git", "--repository", "/r"}, nil, binary("uvx", "mcp-server-git", "--repository", "/r")},
		{"absolute npx", "/usr/local/bin/npx", []string{"-y", "pkg"}, nil, binary("/usr/local/bin/npx", "-y", "pkg")},
		{"node", "node", []string{"/opt/srv/index.js"}, nil, binary("node", "/opt/srv/index.js")},
		{"python", "python", []string{"-m", "mcp_server_time"}, nil, binary("python", "-m", "mcp_server_time")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			entry := map[string]any{"command": tc.command, "args": tc.args}
			if tc.env != nil {
				entry["env"] = tc.env
			}
			content, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"s": entry}})
			got, err := serverfile.Parse("", content, nil)
			if err != nil {
				t.Fatal(err)
			}
			if p := got[0].Config.Package; !reflect.DeepEqual(p, tc.want) {
				t.Errorf("package = %+v, want %+v", p, tc.want)
			}
			if got[0].Config.Transport.Type != model.TransportStdio {
				t.Errorf("transport = %+v", got[0].Config.Transport)
			}
		})
	}
}

func TestSecretsStayOutOfConfigs(t *testing.T) {
	refused := []struct{ name, content, field, msg string }{
		{"secret var in args", `{"mcpServers": {"s": {"command": "x", "args": ["--k", "${API_KEY}"]}}}`, "mcpServers.s.args[1]", "secret variable ${API_KEY} can only be used in env or headers"},
		{"secret var in command", `{"mcpServers": {"s": {"command": "${TOKEN}"}}}`, "mcpServers.s.command", "secret variable ${TOKEN}"},
		{"secret var in url", `{"mcpServers": {"s": {"url": "https://h.example/${TOKEN}"}}}`, "mcpServers.s.url", "secret variable ${TOKEN}"},
		{"password input in args", `{"inputs": [{"id": "pw", "password": true}], "servers": {"s": {"command": "x", "args": ["${input:pw}"]}}}`, "servers.s.args[0]", "secret variable ${pw}"},
		{"literal flag value", `{"mcpServers": {"s": {"command": "npx", "args": ["-y", "@smithery/cli", "run", "x", "--key", "0f9a8b7c"]}}}`, "mcpServers.s.args[5]", "a secret on the command line"},
		{"literal flag=value", `{"mcpServers": {"s": {"command": "srv", "args": ["--api-key=sk-live-1"]}}}`, "mcpServers.s.args[0]", "a secret on the command line"},
		{"docker -e with value", `{"mcpServers": {"s": {"command": "docker", "args": ["run", "-i", "-e", "GITHUB_TOKEN=ghp_1", "img"]}}}`, "mcpServers.s.args[3]", "a secret on the command line"},
		{"secret in url query", `{"mcpServers": {"s": {"url": "https://server.smithery.ai/x/mcp?api_key=abc&profile=p"}}}`, "mcpServers.s.url", "secret in its query (api_key)"},
		{"password in url", `{"mcpServers": {"s": {"url": "https://u:pw@h.example/mcp"}}}`, "mcpServers.s.url", "carries a password"},
		// What only the sealer refused before, with a config's field
		// (package.args.2) that does not say which server of the file.
		{"password in a plain argument", `{"mcpServers": {"pg": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-postgres", "postgresql://u:pw@localhost/db"]}}}`,
			"mcpServers.pg.args[2]", "a secret on the command line"},
		{"secret in url fragment", `{"mcpServers": {"s": {"url": "https://h.example/mcp#access_token=abc"}}}`, "mcpServers.s.url", "the URL carries a secret"},
		{"mcp.yaml password in argument", "servers:\n  pg:\n    transport: {type: stdio, command: pgmcp, args: [--verbose, 'postgres://u:pw@db/x']}\n",
			"servers.pg.transport.args[1]", "a secret on the command line"},
		{"native password in url", `{"servers": [{"name": "a", "package": {"type": "http", "identifier": "https://h.example/x"}, "transport": {"type": "http", "url": "https://u:pw@h.example/x"}}]}`,
			"servers[0].transport.url", "a secret in a URL is not allowed"},
		{"native secret argument", `{"servers": [{"name": "a", "package": {"type": "npm", "identifier": "p", "args": ["--verbose", "--token=abc"]}, "transport": {"type": "stdio"}}]}`,
			"servers[0].package.args[1]", "a secret on the command line is not allowed"},
		{"native secret in config", `{"servers": [{"name": "a", "package": {"type": "npm", "identifier": "p"}, "transport": {"type": "stdio"}, "config": {"key": "${API_KEY}"}}]}`,
			"servers[0].config.key", "secret variable ${API_KEY}"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			got, err := serverfile.Parse("", []byte(tc.content), map[string]string{"API_KEY": "k", "TOKEN": "t", "pw": "p"})
			if err == nil {
				t.Fatalf("parsed %s", dump(got))
			}
			e := wantErr(t, err, tc.field, tc.msg)
			for _, v := range []string{"0f9a8b7c", "sk-live-1", "ghp_1", "abc"} {
				if strings.Contains(e.Message, v) {
					t.Errorf("error quotes a secret: %s", e.Message)
				}
			}
		})
	}
	// Not secrets, whatever the flag is called.
	ok := `{"mcpServers": {"s": {"command": "srv", "args": ["--token-file", "/run/token", "--no-token", "--env", "-x",
	  "--max-tokens", "4096", "--auth-server=https://auth.example.com", "--oauth-enabled", "true"]}}}`
	if _, err := serverfile.Parse("", []byte(ok), nil); err != nil {
		t.Fatal(err)
	}
	// Headers: secret by name, or by a secret variable in the value.
	content := `{"mcpServers": {"r": {"url": "https://h.example/mcp", "headers": {"X-API-Key": "k1", "X-Tenant": "${TENANT_SECRET}", "X-Region": "${REGION}", "Cookie": ""}}}}`
	got, err := serverfile.Parse("", []byte(content), map[string]string{"TENANT_SECRET": "t1", "REGION": "eu"})
	if err != nil {
		t.Fatal(err)
	}
	tr := got[0].Config.Transport
	if !maps.Equal(tr.Headers, map[string]string{"X-Region": "eu"}) || !slices.Equal(tr.SecretHeaders, []string{"Cookie", "X-API-Key", "X-Tenant"}) ||
		!maps.Equal(got[0].Secrets.Headers, map[string]string{"X-API-Key": "k1", "X-Tenant": "t1"}) || got[0].Config.AuthType != model.AuthAPIKey {
		t.Errorf("transport %+v secrets %+v", tr, got[0].Secrets)
	}
}

func TestStrictness(t *testing.T) {
	cases := []struct{ name, content, field, msg string }{
		{"unknown entry field", `{"mcpServers": {"a": {"command": "x", "comand": "y"}}}`, "mcpServers.a.comand", `unknown field "comand"`},
		{"cwd", `{"mcpServers": {"a": {"command": "x", "cwd": "/w"}}}`, "mcpServers.a.cwd", "cwd is not supported"},
		{"envFile", `{"servers": {"a": {"type": "stdio", "command": "x", "envFile": "${workspaceFolder}/.env"}}}`, "servers.a.envFile", "envFile is not supported"},
		{"yaml unknown field", "servers:\n  a:\n    transport: {type: stdio, command: x}\n    timeout: 5\n", "servers.a.timeout", `unknown field "timeout"`},
		{"yaml unknown transport field", "servers:\n  a:\n    transport: {type: stdio, command: x, cwd: /w}\n", "servers.a.transport.cwd", `unknown field "cwd"`},
		{"yaml unknown oauth field", "servers:\n  a:\n    transport: {type: stdio, command: x}\n    oauth: {client_id: c, pkce: true}\n", "servers.a.oauth.pkce", `unknown field "pkce"`},
		{"args not a list", `{"mcpServers": {"a": {"command": "x", "args": "-y pkg"}}}`, "mcpServers.a.args", "must be a list of strings"},
		{"null arg", `{"mcpServers": {"a": {"command": "x", "args": ["a", null]}}}`, "mcpServers.a.args[1]", "must be a string"},
		{"env value a list", `{"mcpServers": {"a": {"command": "x", "env": {"A": ["b"]}}}}`, "mcpServers.a.env.A", "must be a string"},
		{"disabled not bool", `{"mcpServers": {"a": {"command": "x", "disabled": "yes"}}}`, "mcpServers.a.disabled", "must be true or false"},
		{"contradiction", `{"mcpServers": {"a": {"command": "x", "disabled": true, "enabled": true}}}`, "mcpServers.a.enabled", "contradicts"},
		{"entry not a mapping", `{"mcpServers": {"a": "npx x"}}`, "mcpServers.a", "must be a mapping"},
		{"mcpServers not a mapping", `{"mcpServers": [{"command": "x"}]}`, "mcpServers", "must be a mapping"},
		{"native unknown top-level", `{"servers": [], "server": []}`, "server", `unknown field "server"`},
		{"native unknown field", `{"servers": [{"name": "a", "nmae": "b"}]}`, "servers[0].nmae", `unknown field "nmae"`},
		{"native unknown nested field", "servers:\n  - name: a\n    package: {type: npm, identifier: p, version: 1}\n    transport: {type: stdio}\n", "servers[0].package.version", `unknown field "version"`},
		{"native unknown env field", "servers:\n  - name: a\n    package: {type: npm, identifier: p}\n    transport: {type: stdio}\n    env_vars: {A: {valeu: x}}\n", "servers[0].env_vars.A.valeu", `unknown field "valeu"`},
		{"native wrong type", `{"servers": [{"name": "a", "package": {"type": "npm", "identifier": "p", "args": "x"}, "transport": {"type": "stdio"}}]}`, "servers[0].package.args", "must be a list of strings"},
		{"native bad duration", "servers:\n  - name: a\n    package: {type: npm, identifier: p}\n    transport: {type: stdio}\n    runtime: {call_timeout: soon}\n", "servers[0]", "invalid duration"},
		{"native invalid config", `{"servers": [{"name": "ok", "package": {"type": "npm", "identifier": "p"}, "transport": {"type": "stdio"}}, {"package": {"type": "npm", "identifier": "q"}, "transport": {"type": "stdio"}}]}`, "servers[1].name", "Name is required"},
		{"native missing credential", "servers:\n  - name: a\n    package: {type: npm, identifier: p}\n    transport: {type: stdio}\n    env_vars: {PORT: {required: true}}\n", "servers[0].env_vars.PORT", "Missing required credentials"},
		{"a map is not ours", `{"servers": {"a": {"name": "a"}}}`, "servers.a.name", `unknown field "name"`},
		{"wrong format given", `{"mcpServers": {"a": {"command": "x"}}}`, "content", "not an mcp.yaml file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			format := ""
			if tc.name == "wrong format given" {
				format = model.FormatMCPYAML
			}
			got, err := serverfile.Parse(format, []byte(tc.content), nil)
			if err == nil {
				t.Fatalf("parsed %s", dump(got))
			}
			if got != nil {
				t.Fatalf("entries with an error: %v", got)
			}
			wantErr(t, err, tc.field, tc.msg)
		})
	}
	// Harmless client fields and other settings beside the servers are accepted.
	got, err := serverfile.Parse("", []byte(`{"globalShortcut": "Ctrl+Space", "mcpServers": {"a": {"command": "x", "autoApprove": ["read"], "alwaysAllow": []}}}`), nil)
	if err != nil || len(got) != 1 {
		t.Fatalf("harmless fields: %v %v", got, err)
	}
	if _, err := serverfile.Parse("xml", []byte(`{"servers": []}`), nil); err == nil {
		t.Fatal("unknown format parsed")
	} else {
		wantErr(t, err, "format", "unknown format")
	}
}

func TestEnabled(t *testing.T) {
	cases := map[string]bool{
		`{"mcpServers": {"a": {"command": "x"}}}`:                                                                                      true,
		`{"mcpServers": {"a": {"command": "x", "disabled": true}}}`:                                                                    false,
		`{"mcpServers": {"a": {"command": "x", "disabled": false}}}`:                                                                   true,
		`{"mcpServers": {"a": {"command": "x", "enabled": false}}}`:                                                                    false,
		"servers:\n  a:\n    transport: {type: stdio, command: x}\n":                                                                   true,
		"servers:\n  a:\n    transport: {type: stdio, command: x}\n    enabled: false\n":                                               false,
		`{"servers": [{"name": "a", "package": {"type": "npm", "identifier": "p"}, "transport": {"type": "stdio"}}]}`:                  false,
		`{"servers": [{"name": "a", "enabled": true, "package": {"type": "npm", "identifier": "p"}, "transport": {"type": "stdio"}}]}`: true,
	}
	for content, want := range cases {
		got, err := serverfile.Parse("", []byte(content), nil)
		if err != nil || got[0].Config.Enabled != want {
			t.Errorf("%s: %v %v, want enabled %v", content, got, err, want)
		}
	}
}

// YAML writers put numbers and booleans where strings are meant.
func TestYAMLScalars(t *testing.T) {
	content := "servers:\n  a:\n    transport:\n      type: stdio\n      command: srv\n      args: [--port, 8080, --verbose, true]\n    env:\n      PORT: 8080\n      DEBUG: yes\n      EMPTY:\n"
	got, err := serverfile.Parse("", []byte(content), nil)
	if err != nil {
		t.Fatal(err)
	}
	c := got[0].Config
	if !slices.Equal(c.Package.Args, []string{"--port", "8080", "--verbose", "true"}) ||
		!reflect.DeepEqual(c.EnvVars, map[string]model.EnvVar{"PORT": {Value: "8080"}, "DEBUG": {Value: "true"}, "EMPTY": {}}) {
		t.Errorf("config = %s", dump(c))
	}
	// Values a YAML reader would take for something else come back as strings.
	tricky := []string{"yes", "no", "on", "null", "~", "0123", "1e3", "- x", "a: b", "#c", " lead", "trail ", "multi\nline", "'q'", `"dq"`, "@at", "*star", "&amp", "!tag", "%pct", "", "ü"}
	env := map[string]model.EnvVar{}
	for i, v := range tricky {
		env["V"+string(rune('A'+i))] = model.EnvVar{Value: v}
	}
	in := conf("t", "t", binary("srv", tricky...), stdio, model.AuthNone, env)
	for _, format := range []string{model.FormatMCPYAML, model.FormatServers, model.FormatMCPServers} {
		out, err := serverfile.Render(format, []model.McpConfig{in})
		if err != nil {
			t.Fatal(err)
		}
		back, err := serverfile.Parse(format, out, nil)
		if err != nil {
			t.Fatalf("%s: %v\n%s", format, err, out)
		}
		if !reflect.DeepEqual(back[0].Config, in) {
			t.Errorf("%s round trip:\n got %s\nwant %s\n%s", format, dump(back[0].Config), dump(in), out)
		}
	}
}

// Native files: secrets are taken out whatever way they are written, and
// what the file says about secret_ref and required is kept.
func TestNativeSecrets(t *testing.T) {
	content := `
servers:
  - name: GitHub
    id: 9d0f6b5e-1c1a-4c53-9a57-3f1c8f1e2b11
    enabled: true
    package: {type: docker, identifier: ghcr.io/github/github-mcp-server}
    transport: {type: stdio}
    env_vars:
      GITHUB_PERSONAL_ACCESS_TOKEN: {value: "${GH_TOKEN}", is_secret: true, required: true}
      OPENAI_API_KEY: {value: sk-literal-1}
      DB_URL: {value: "postgres://u:${DB_PASSWORD}@h/db"}
      OPTIONAL_TOKEN: {value: "${OPT:-}", secret_ref: opt, is_secret: true}
      STORED: {secret_ref: github, is_secret: true, required: true}
      KEYFILE_TOKEN: {keyfile_path: /run/secrets/k}
      PLAIN: {value: "$${HOME}/x"}
    config: {toolsets: ["${TOOLSET}"], nested: {count: 1}}
  - name: Remote
    transport:
      type: http
      url: https://docs.example.com/mcp
      headers: {Authorization: Bearer abc, X-Plain: p, X-Custom: "${GH_TOKEN}"}
      secret_headers: [X-Other]
`
	got, err := serverfile.Parse("", []byte(content), map[string]string{"GH_TOKEN": "ghp_n", "DB_PASSWORD": "pw1", "TOOLSET": "repos"})
	if err != nil {
		t.Fatal(err)
	}
	gh := got[0]
	wantEnv := map[string]model.EnvVar{
		"GITHUB_PERSONAL_ACCESS_TOKEN": secretVar("GITHUB_PERSONAL_ACCESS_TOKEN"),
		"OPENAI_API_KEY":               {SecretRef: "OPENAI_API_KEY", IsSecret: true},
		"DB_URL":                       {SecretRef: "DB_URL", IsSecret: true},
		"OPTIONAL_TOKEN":               {SecretRef: "opt", IsSecret: true},
		"STORED":                       {SecretRef: "github", IsSecret: true, Required: true},
		"KEYFILE_TOKEN":                {KeyfilePath: "/run/secrets/k"},
		"PLAIN":                        {Value: "${HOME}/x"},
	}
	if !reflect.DeepEqual(gh.Config.EnvVars, wantEnv) {
		t.Errorf("env:\n got %s\nwant %s", dump(gh.Config.EnvVars), dump(wantEnv))
	}
	wantSecrets := map[string]string{"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_n", "OPENAI_API_KEY": "sk-literal-1", "DB_URL": "postgres://u:pw1@h/db"}
	if !maps.Equal(gh.Secrets.Env, wantSecrets) {
		t.Errorf("secrets %v", gh.Secrets.Env)
	}
	if gh.Config.ID != "9d0f6b5e-1c1a-4c53-9a57-3f1c8f1e2b11" || gh.Config.AuthType != model.AuthAPIKey || gh.Config.Slug != "github" ||
		string(gh.Config.Config) != `{"nested":{"count":1},"toolsets":["repos"]}` {
		t.Errorf("config = %s", dump(gh.Config))
	}
	remote := got[1]
	if tr := remote.Config.Transport; !maps.Equal(tr.Headers, map[string]string{"X-Plain": "p"}) ||
		!slices.Equal(tr.SecretHeaders, []string{"Authorization", "X-Custom", "X-Other"}) ||
		!maps.Equal(remote.Secrets.Headers, map[string]string{"Authorization": "Bearer abc", "X-Custom": "ghp_n"}) ||
		remote.Config.AuthType != model.AuthAPIKey {
		t.Errorf("remote = %s secrets %v", dump(remote.Config), remote.Secrets)
	}
	for _, e := range got {
		data, _ := json.Marshal(e.Config)
		noSecretIn(t, e.Config.Name, data, []string{"ghp_n", "sk-literal-1", "pw1", "abc"})
	}
	// Render → Parse gives the same again (id and timestamps aside).
	var configs []model.McpConfig
	for _, e := range got {
		configs = append(configs, e.Config)
	}
	out, err := serverfile.Render(model.FormatServers, configs)
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for _, name := range serverfile.References(out) {
		vars[name] = "v-" + name
	}
	back, err := serverfile.Parse(model.FormatServers, out, vars)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for i := range configs {
		configs[i].ID = ""
	}
	for i := range back {
		if !reflect.DeepEqual(back[i].Config, configs[i]) {
			t.Errorf("round trip %d:\n got %s\nwant %s", i, dump(back[i].Config), dump(configs[i]))
		}
	}
	if back[0].Secrets.Env["opt"] != "v-OPTIONAL_TOKEN" || back[1].Secrets.Headers["X-Other"] != "v-X_OTHER_SECRET" {
		t.Errorf("placeholders: %v %v\n%s", back[0].Secrets, back[1].Secrets, out)
	}
}
