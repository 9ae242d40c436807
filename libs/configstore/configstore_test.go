package configstore_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/testkit"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/configstore"
	"github.com/mcpbus/mcpbus/libs/model"
)

const goodJSON = `{
  "servers": [
    {"name": "Filesystem", "package": {"type": "npm", "identifier": "@modelcontextprotocol/server-filesystem", "args": ["/tmp"]},
     "transport": {"type": "stdio"}, "enabled": true},
    {"name": "Remote Docs", "slug": "docs", "transport": {"type": "http", "url": "https://docs.example.com/mcp",
     "headers": {"Authorization": "Bearer abc"}}, "runtime": {"call_timeout": "45s", "start_timeout": 2000}}
  ]
}`

const goodYAML = `
# servers for mcpbus up
servers:
  - name: Filesystem
    enabled: true
    package:
      type: npm
      identifier: "@modelcontextprotocol/server-filesystem"
      args: [/tmp]
    transport: {type: stdio}
  - name: Remote Docs
    slug: docs
    transport:
      type: http
      url: https://docs.example.com/mcp
      headers:
        Authorization: Bearer abc
    runtime:
      call_timeout: 45s
      start_timeout: 2000
  - name: GitHub
    auth_type: api_key
    package: {type: docker, identifier: ghcr.io/github/github-mcp-server}
    transport: {type: stdio}
    env_vars:
      GITHUB_PERSONAL_ACCESS_TOKEN: {secret_ref: github, is_secret: true, required: true}
    config: {toolsets: [repos, issues]}
`

func wantErr(t *testing.T, err error, code apierr.Code, field string) *apierr.Error {
	t.Helper()
	var e *apierr.Error
	if !errors.As(err, &e) {
		t.Fatalf("want %s, got %T %v", code, err, err)
	}
	if e.Code != code || e.Field != field {
		t.Fatalf("want %s field %q, got %s field %q: %s", code, field, e.Code, e.Field, e.Message)
	}
	return e
}

func TestParseGood(t *testing.T) {
	for name, data := range map[string]string{"json": goodJSON, "yaml": goodYAML} {
		t.Run(name, func(t *testing.T) {
			got, err := configstore.Parse([]byte(data))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) < 2 {
				t.Fatalf("got %d servers", len(got))
			}
			fs, docs := got[0], got[1]
			if fs.Slug != "filesystem" || !fs.Enabled || fs.Package.Identifier != "@modelcontextprotocol/server-filesystem" ||
				!slices.Equal(fs.Package.Args, []string{"/tmp"}) || fs.Source.Type != model.SourceManual || fs.AuthType != model.AuthNone {
				t.Errorf("filesystem = %+v", fs)
			}
			if docs.Slug != "docs" || docs.Package.Type != model.PackageHTTP || docs.Package.Identifier != "https://docs.example.com/mcp" ||
				docs.Transport.Headers["Authorization"] != "Bearer abc" || docs.Enabled ||
				docs.Runtime.CallTimeout.Or(0) != 45*time.Second || docs.Runtime.StartTimeout.Or(0) != 2*time.Second {
				t.Errorf("docs = %+v", docs)
			}
			if name == "yaml" {
				gh := got[2]
				if gh.Slug != "github" || gh.EnvVars["GITHUB_PERSONAL_ACCESS_TOKEN"].SecretRef != "github" || string(gh.Config) != `{"toolsets":["repos","issues"]}` {
					t.Errorf("github = %+v config %s", gh, gh.Config)
				}
			}
		})
	}
	for _, empty := range []string{"", "servers: []", `{"servers":[]}`, "# nothing\n"} {
		got, err := configstore.Parse([]byte(empty))
		if err != nil || len(got) != 0 {
			t.Errorf("Parse(%q) = %v, %v", empty, got, err)
		}
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name, data, field, message string
	}{
		{"unknown server field", `{"servers":[{"name":"a","nmae":"typo","package":{"type":"npm","identifier":"p"},"transport":{"type":"stdio"}}]}`, "", ""},
		{"unknown nested field", "servers:\n  - name: a\n    package: {type: npm, identifier: p, version: 1}\n    transport: {type: stdio}\n", "", ""},
		{"unknown top-level field", "servers: []\nserver: []\n", "", ""},
		{"malformed yaml", "servers:\n  - name: a\n   bad indent: [\n", "", ""},
		{"malformed json", `{"servers":[{"name":`, "", ""},
		{"wrong type", `{"servers":{"name":"a"}}`, "", ""},
		{"tabs", "servers:\n\t- name: a\n", "", ""},
		{"bad duration", "servers:\n  - name: a\n    package: {type: npm, identifier: p}\n    transport: {type: stdio}\n    runtime: {call_timeout: soon}\n", "", ""},
		{"missing name", `{"servers":[{"name":"ok","package":{"type":"npm","identifier":"p"},"transport":{"type":"stdio"}},{"package":{"type":"npm","identifier":"q"},"transport":{"type":"stdio"}}]}`,
			"servers[1].name", "Name is required"},
		{"missing identifier", "servers:\n  - name: a\n    package: {type: npm}\n    transport: {type: stdio}\n", "servers[0].package.identifier", "Package identifier required"},
		{"missing transport", "servers:\n  - name: a\n    package: {type: npm, identifier: p}\n", "servers[0].transport", "Transport required"},
		{"missing credential", "servers:\n  - name: a\n    package: {type: npm, identifier: p}\n    transport: {type: stdio}\n    env_vars: {TOKEN: {required: true}}\n",
			"servers[0].env_vars.TOKEN", "Missing required credentials"},
		{"bad url", "servers:\n  - name: a\n    transport: {type: http, url: 'ftp://x'}\n", "servers[0].transport.url", "An http transport needs an http(s) URL"},
		{"keys that merge in JSON", "servers:\n  - name: a\n    package: {type: npm, identifier: p}\n    transport: {type: stdio}\n    env_vars:\n      1: {value: one}\n      \"1\": {value: uno}\n",
			"", `servers file: line 7: the keys 1 (line 6) and "1" both become the key "1", and one would silently win`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := configstore.Parse([]byte(tc.data))
			if err == nil {
				t.Fatalf("parsed %+v", got)
			}
			e := wantErr(t, err, apierr.Validation, tc.field)
			if tc.message != "" && e.Message != tc.message {
				t.Fatalf("message %q, want %q", e.Message, tc.message)
			}
			if tc.field == "" && !strings.HasPrefix(e.Message, "servers file: ") {
				t.Fatalf("message %q", e.Message)
			}
		})
	}
}

// The line of a YAML error is the line the mistake is on (the YAML library
// counts its parser errors' lines from 0).
func TestParseErrorLine(t *testing.T) {
	data := "servers:\n  - name: a\n- name: b\n    package: {type: npm, identifier: p}\n"
	_, err := configstore.Parse([]byte(data))
	e := wantErr(t, err, apierr.Validation, "")
	if !strings.Contains(e.Message, "line 3: did not find expected key") {
		t.Fatalf("message %q, want the error on line 3", e.Message)
	}
}

func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "servers.yaml")
	if err := os.WriteFile(p, []byte(goodYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := configstore.LoadFile(p)
	if err != nil || len(got) != 3 {
		t.Fatalf("LoadFile = %d, %v", len(got), err)
	}
	if _, err := configstore.LoadFile(filepath.Join(dir, "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(goodJSON))
	f.Add([]byte(goodYAML))
	for _, s := range []string{
		"", "servers:", "servers: ~", "servers: [~]", "servers: [{}]", "- a\n- b", "servers: !!binary aGVsbG8=",
		"servers:\n  - &a {name: x}\n  - *a\n", "a: &a [*a]", "servers: [{name: x, transport: {type: http, url: 'http://h'}}]",
		"{\"servers\": [{\"name\": \"\\u0000\"}]}", "servers:\n  - name: x\n    runtime: {call_timeout: 1e400}\n",
		"servers:\n  - name: x\n    config: {a: {b: {c: [1, 2, {d: .inf}]}}}\n", "servers: [{env_vars: {'': {}}}]", "\xff\xfe\x00",
		"%YAML 1.1\n---\nservers: []\n...\n", "servers: [{name: y, created_at: 2024-13-45}]", "? [a]\n: b\n", "servers:\n  - name: \"é\"\n    slug: É\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		servers, err := configstore.Parse(data)
		if err != nil {
			var e *apierr.Error
			if !errors.As(err, &e) || e.Code != apierr.Validation || e.Message == "" {
				t.Fatalf("error %T %v", err, err)
			}
			if servers != nil {
				t.Fatalf("servers with an error")
			}
			return
		}
		for i, c := range servers {
			if err := c.Validate(); err != nil {
				t.Fatalf("servers[%d] returned but invalid: %v", i, err)
			}
		}
	})
}

// --- the store, on a real embedded JetStream ---

func newStore(t *testing.T) configstore.Store {
	t.Helper()
	ns := testkit.NATS(t)
	nc := testkit.Connect(t, ns)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	assets, err := bus.EnsureAssets(ctx, js, bus.NewSubjects(""), bus.AssetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return configstore.Store{KV: assets.Configs}
}

func fsConfig() model.McpConfig {
	return model.McpConfig{
		Name:      "Filesystem",
		Package:   model.Package{Type: model.PackageNPM, Identifier: "@modelcontextprotocol/server-filesystem", Args: []string{"/tmp"}},
		Transport: model.Transport{Type: model.TransportStdio},
	}
}

func TestUpsertAndList(t *testing.T) {
	s := newStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	empty, err := s.List(ctx)
	if err != nil || len(empty) != 0 {
		t.Fatalf("List on empty bucket = %v, %v", empty, err)
	}

	first, err := s.Upsert(ctx, fsConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := uuid.Parse(first.ID); err != nil {
		t.Fatalf("id %q: %v", first.ID, err)
	}
	if first.Slug != "filesystem" || first.CreatedAt.IsZero() || first.UpdatedAt.IsZero() || first.Revision == 0 {
		t.Fatalf("first = %+v", first)
	}

	// The same slug again (a reloaded file): same id and creation time, new revision.
	time.Sleep(5 * time.Millisecond)
	again := fsConfig()
	again.Package.Args = []string{"/srv"}
	second, err := s.Upsert(ctx, again)
	if err != nil {
		t.Fatal(err)
	}
	if second.ID != first.ID || !second.CreatedAt.Equal(first.CreatedAt) || !second.UpdatedAt.After(first.UpdatedAt) ||
		second.Revision <= first.Revision {
		t.Fatalf("second = %+v, first = %+v", second, first)
	}
	// With its own id explicitly: still the same record.
	explicit := fsConfig()
	explicit.ID = first.ID
	third, err := s.Upsert(ctx, explicit)
	if err != nil || third.ID != first.ID || !third.CreatedAt.Equal(first.CreatedAt) {
		t.Fatalf("explicit same id: %+v, %v", third, err)
	}

	// Another record claiming the slug: CONFLICT, nothing written.
	other := fsConfig()
	other.ID = uuid.NewString()
	_, err = s.Upsert(ctx, other)
	wantErr(t, err, apierr.Conflict, "slug")

	// A bad id: VALIDATION_ERROR.
	bad := fsConfig()
	bad.Name, bad.ID = "Other", "not-a-uuid"
	_, err = s.Upsert(ctx, bad)
	wantErr(t, err, apierr.Validation, "id")

	// An invalid config: VALIDATION_ERROR, nothing written.
	invalid := fsConfig()
	invalid.Name = " "
	_, err = s.Upsert(ctx, invalid)
	wantErr(t, err, apierr.Validation, "name")
	missing := fsConfig()
	missing.Name = "needs token"
	missing.EnvVars = map[string]model.EnvVar{"TOKEN": {Required: true}}
	_, err = s.Upsert(ctx, missing)
	if e := wantErr(t, err, apierr.Validation, "env_vars.TOKEN"); e.Message != "Missing required credentials" {
		t.Fatalf("message %q", e.Message)
	}

	// A second server with its own id.
	id := uuid.NewString()
	docs := model.McpConfig{ID: id, Name: "Docs", Transport: model.Transport{Type: model.TransportHTTP, URL: "https://docs.example.com/mcp"}}
	stored, err := s.Upsert(ctx, docs)
	if err != nil || stored.ID != id || stored.Slug != "docs" || stored.Package.Type != model.PackageHTTP {
		t.Fatalf("docs: %+v, %v", stored, err)
	}

	// A foreign, undecodable entry in the bucket is skipped by List.
	if _, err := s.KV.Put(ctx, "garbage", []byte("not json")); err != nil {
		t.Fatal(err)
	}

	list, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 {
		t.Fatalf("List = %d configs: %+v", len(list), list)
	}
	slices.SortFunc(list, func(a, b model.McpConfig) int { return strings.Compare(a.Slug, b.Slug) })
	if got := list[0]; got.ID != id || got.Revision != stored.Revision || got.Transport.URL != "https://docs.example.com/mcp" {
		t.Errorf("docs in list = %+v", got)
	}
	if got := list[1]; got.ID != first.ID || got.Revision != third.Revision || !slices.Equal(got.Package.Args, []string{"/tmp"}) ||
		!got.CreatedAt.Equal(first.CreatedAt) || got.Name != "Filesystem" {
		t.Errorf("filesystem in list = %+v", got)
	}

	// A deleted record no longer counts for slugs.
	if err := s.KV.Delete(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	re, err := s.Upsert(ctx, other)
	if err != nil || re.ID != other.ID {
		t.Fatalf("reuse slug after delete: %+v, %v", re, err)
	}
}
