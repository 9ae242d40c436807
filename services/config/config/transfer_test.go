package config_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/configstore"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/config/config"
)

const claudeDesktop = `{
  "mcpServers": {
    "github": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-github"],
      "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "${GH_TOKEN}", "LOG_LEVEL": "info"}
    },
    "remote": {
      "url": "https://mcp.example.com/mcp",
      "headers": {"Authorization": "Bearer ${REMOTE_TOKEN}"}
    }
  }
}`

func slugsOf(cfgs []model.McpConfig) []string {
	var out []string
	for _, c := range cfgs {
		out = append(out, c.Slug)
	}
	slices.Sort(out)
	return out
}

func TestImport(t *testing.T) {
	e := newEnv(t)
	vars := map[string]string{"GH_TOKEN": "ghp_imported_secret", "REMOTE_TOKEN": "remote-secret-42"}
	var out model.ConfigImportReply
	if err := e.call("import", model.ConfigImportRequest{Content: claudeDesktop, Vars: vars}, &out); err != nil {
		t.Fatal(err)
	}
	if got := slugsOf(out.Created); !slices.Equal(got, []string{"github", "remote"}) || len(out.Updated) != 0 {
		t.Fatalf("created %v updated %v", got, out.Updated)
	}
	if got := slugsOf(e.list()); !slices.Equal(got, []string{"github", "remote"}) {
		t.Fatalf("list %v", got)
	}
	for _, c := range out.Created {
		raw := e.rawConfig(c.ID)
		for _, s := range vars {
			if bytes.Contains(raw, []byte(s)) {
				t.Fatalf("stored config %s holds a secret: %s", c.Slug, raw)
			}
		}
		creds, _ := e.cred.get(c.ID)
		switch c.Slug {
		case "github":
			if creds.Env["GITHUB_PERSONAL_ACCESS_TOKEN"] != vars["GH_TOKEN"] || c.EnvVars["LOG_LEVEL"].Value != "info" {
				t.Fatalf("github: secrets %v, env %+v", creds.Env, c.EnvVars)
			}
		case "remote":
			if creds.Headers["Authorization"] != "Bearer "+vars["REMOTE_TOKEN"] ||
				!slices.Equal(c.Transport.SecretHeaders, []string{"Authorization"}) {
				t.Fatalf("remote: secrets %v, transport %+v", creds.Headers, c.Transport)
			}
		}
	}
	var types []string
	for _, ev := range e.events() {
		types = append(types, ev.Type+":"+ev.Server)
	}
	if want := []string{"created:github", "created:remote"}; !slices.Equal(types, want) {
		t.Fatalf("events %v", types)
	}

	// Again without replace: a clash, nothing changes.
	err := e.call("import", model.ConfigImportRequest{Content: claudeDesktop, Vars: vars}, nil)
	wantErr(t, err, apierr.Conflict, "servers[0].slug", "")
	if n := len(e.list()); n != 2 {
		t.Fatalf("%d configs after refused import", n)
	}

	// With replace (and the enabled override): updated in place, ids kept.
	on := true
	var again model.ConfigImportReply
	if err := e.call("import", model.ConfigImportRequest{Content: claudeDesktop, Vars: vars, Replace: true, Enabled: &on}, &again); err != nil {
		t.Fatal(err)
	}
	if len(again.Created) != 0 || len(again.Updated) != 2 {
		t.Fatalf("replace: %+v", again)
	}
	for _, c := range again.Updated {
		before := out.Created[slices.IndexFunc(out.Created, func(x model.McpConfig) bool { return x.Slug == c.Slug })]
		if c.ID != before.ID || !c.CreatedAt.Equal(before.CreatedAt) || c.Revision <= before.Revision || !c.Enabled {
			t.Fatalf("replaced %s: %+v (was %+v)", c.Slug, c, before)
		}
	}
}

// All or nothing: an entry refused after the first was checked leaves nothing behind.
func TestImportAllOrNothing(t *testing.T) {
	e := newEnv(t)
	existing := e.mustCreate(stdio("Beta"), nil)
	file := `{"servers": [
	  {"name": "Alpha", "package": {"type": "npm", "identifier": "alpha-mcp"}, "transport": {"type": "stdio"},
	   "env_vars": {"ALPHA_API_KEY": {"value": "alpha-secret", "is_secret": true}}},
	  {"name": "Beta", "package": {"type": "npm", "identifier": "beta-mcp"}, "transport": {"type": "stdio"}}
	]}`
	err := e.call("import", model.ConfigImportRequest{Content: file}, nil)
	wantErr(t, err, apierr.Conflict, "servers[1].slug", "slug beta is already used by server "+existing.ID+"; import with replace (mcpbus servers import --replace) to update it")
	if got := slugsOf(e.list()); !slices.Equal(got, []string{"beta"}) {
		t.Fatalf("list after refused import: %v", got)
	}
	if e.cred.count() != 0 || len(e.cred.callsOf("set")) != 0 {
		t.Fatal("secrets of a refused import were stored")
	}

	// The second entry misses a required secret: nothing is written.
	file2 := `{"servers": [
	  {"name": "Alpha", "package": {"type": "npm", "identifier": "alpha-mcp"}, "transport": {"type": "stdio"},
	   "env_vars": {"ALPHA_API_KEY": {"value": "alpha-secret", "is_secret": true}}},
	  {"name": "Gamma", "package": {"type": "npm", "identifier": "gamma-mcp"}, "transport": {"type": "stdio"},
	   "env_vars": {"GAMMA_KEY": {"is_secret": true, "required": true}}}
	]}`
	err = e.call("import", model.ConfigImportRequest{Content: file2}, nil)
	wantErr(t, err, apierr.Validation, "servers[1].env_vars.GAMMA_KEY", "Missing required credentials")
	if got := slugsOf(e.list()); !slices.Equal(got, []string{"beta"}) || e.cred.count() != 0 {
		t.Fatalf("list after refused import: %v, %d secret records", got, e.cred.count())
	}

	// Two entries with one slug.
	file3 := `{"servers": [
	  {"name": "Delta", "package": {"type": "npm", "identifier": "d1"}, "transport": {"type": "stdio"}},
	  {"name": "delta", "package": {"type": "npm", "identifier": "d2"}, "transport": {"type": "stdio"}}
	]}`
	wantErr(t, e.call("import", model.ConfigImportRequest{Content: file3}, nil), apierr.Conflict, "servers[1].slug", "")

	// A write that fails half-way (the credential service refuses the second
	// entry's secrets) undoes the first: config, slug and secrets.
	file4 := `{"servers": [
	  {"name": "Alpha", "package": {"type": "npm", "identifier": "alpha-mcp"}, "transport": {"type": "stdio"},
	   "env_vars": {"ALPHA_API_KEY": {"value": "alpha-secret", "is_secret": true}}},
	  {"name": "Epsilon", "package": {"type": "npm", "identifier": "eps-mcp"}, "transport": {"type": "stdio"},
	   "env_vars": {"EPS_API_KEY": {"value": "eps-secret", "is_secret": true}}}
	]}`
	e.cred.failSetWhen(func(in model.CredSetRequest) error {
		if _, ok := in.Credentials.Env["EPS_API_KEY"]; ok {
			return apierr.New(apierr.Internal, "vault sealed")
		}
		return nil
	})
	wantErr(t, e.call("import", model.ConfigImportRequest{Content: file4}, nil), apierr.Internal, "", "vault sealed")
	if got := slugsOf(e.list()); !slices.Equal(got, []string{"beta"}) {
		t.Fatalf("list after failed import: %v", got)
	}
	if k := e.keys(bus.BucketSlugs); !slices.Equal(k, []string{"beta"}) {
		t.Fatalf("slugs after failed import: %v", k)
	}
	if len(e.cred.callsOf("set")) != 2 || e.cred.count() != 0 {
		t.Fatalf("secrets after failed import: %d records, %d sets", e.cred.count(), len(e.cred.callsOf("set")))
	}
	var types []string
	for _, ev := range e.events() {
		types = append(types, ev.Type+":"+ev.Server)
	}
	if !slices.Equal(types, []string{"created:beta"}) {
		t.Fatalf("events of failed imports: %v", types)
	}

	// Bad requests.
	wantErr(t, e.call("import", model.ConfigImportRequest{}, nil), apierr.Validation, "content", "")
	wantErr(t, e.call("import", model.ConfigImportRequest{Content: "{not json"}, nil), apierr.Validation, "content", "")
	wantErr(t, e.call("import", model.ConfigImportRequest{Content: `{"servers": []}`}, nil), apierr.Validation, "content", "the file has no servers")
	err = e.call("import", model.ConfigImportRequest{Content: claudeDesktop}, nil) // ${GH_TOKEN} has no value
	if apierr.Of(err) != apierr.Validation {
		t.Fatalf("import with a missing variable: %v", err)
	}
}

func TestExport(t *testing.T) {
	e := newEnv(t)
	cfg := stdio("Secretive")
	cfg.EnvVars = map[string]model.EnvVar{"API_KEY": {Value: "sk-export-1", IsSecret: true, Required: true}, "MODE": {Value: "fast"}}
	e.mustCreate(cfg, nil)
	remote := model.McpConfig{Name: "Remote", Transport: model.Transport{Type: model.TransportHTTP, URL: "https://mcp.example.com/mcp",
		Headers: map[string]string{"Authorization": "Bearer hdr-export-2", "X-Team": "blue"}}}
	e.mustCreate(remote, nil)
	// Written straight to KV with a plain-text secret: an export still hides it.
	legacy := stdio("Legacy")
	legacy.EnvVars = map[string]model.EnvVar{"LEGACY_TOKEN": {Value: "legacy-secret-3"}}
	if _, err := (configstore.Store{KV: e.kv(bus.BucketConfigs)}).Upsert(context.Background(), legacy); err != nil {
		t.Fatal(err)
	}
	secrets := []string{"sk-export-1", "hdr-export-2", "legacy-secret-3"}
	for _, format := range []string{model.FormatServers, model.FormatMCPServers, model.FormatMCPYAML} {
		var out model.ConfigExportReply
		if err := e.call("export", model.ConfigExportRequest{Format: format}, &out); err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		if out.Format != format || !strings.Contains(out.Content, "secretive") && !strings.Contains(out.Content, "Secretive") {
			t.Fatalf("%s: %+v", format, out)
		}
		for _, s := range secrets {
			if strings.Contains(out.Content, s) {
				t.Fatalf("%s export contains secret %q:\n%s", format, s, out.Content)
			}
		}
		for _, want := range []string{"${API_KEY}", "fast", "blue", "LEGACY_TOKEN"} {
			if !strings.Contains(out.Content, want) {
				t.Errorf("%s export lacks %q:\n%s", format, want, out.Content)
			}
		}
	}
	// Chosen servers only.
	var out model.ConfigExportReply
	if err := e.call("export", model.ConfigExportRequest{Format: model.FormatServers, Servers: []string{"remote"}}, &out); err != nil {
		t.Fatal(err)
	}
	var file model.ServersFile
	if err := json.Unmarshal([]byte(out.Content), &file); err != nil || len(file.Servers) != 1 || file.Servers[0].Name != "Remote" {
		t.Fatalf("chosen export: %v %s", err, out.Content)
	}
	wantErr(t, e.call("export", model.ConfigExportRequest{Servers: []string{"remote", "nope"}}, nil), apierr.NotFound, "servers[1]", "")
	wantErr(t, e.call("export", model.ConfigExportRequest{Format: "toml"}, nil), apierr.Validation, "format", "")

	// Round trip: the export imports into an empty system with the secrets as variables.
	if err := e.call("export", model.ConfigExportRequest{Servers: []string{"secretive", "remote"}}, &out); err != nil {
		t.Fatal(err)
	}
	e2 := newEnv(t)
	var imp model.ConfigImportReply
	vars := map[string]string{"API_KEY": "sk-new", "AUTHORIZATION": "Bearer new"}
	if err := e2.call("import", model.ConfigImportRequest{Content: out.Content, Vars: vars}, &imp); err != nil {
		t.Fatalf("re-import: %v\n%s", err, out.Content)
	}
	if got := slugsOf(imp.Created); !slices.Equal(got, []string{"remote", "secretive"}) {
		t.Fatalf("re-imported %v", got)
	}
	for _, c := range imp.Created {
		creds, _ := e2.cred.get(c.ID)
		if c.Slug == "secretive" && (creds.Env["API_KEY"] != "sk-new" || c.EnvVars["MODE"].Value != "fast") {
			t.Fatalf("re-imported secretive: %+v %+v", c.EnvVars, creds)
		}
	}
}

// A credential service that stops answering during the sixth write of an
// import: the five before are undone all the same. Each undo has its own
// budget, and the service's own records (configs, slug reservations) are put
// back before it asks the credential service to remove the secrets, so a
// silent credential service can neither leave a server written nor hold the
// answer past the callers' timeout (it cost one request timeout per undo).
func TestImportUndoneWhenCredentialsHang(t *testing.T) {
	e := newEnv(t, func(o *config.Options) { o.RequestTimeout = 3 * time.Second })
	var mu sync.Mutex
	writes := 0
	e.cred.onRequest(func(verb string, data []byte) bool {
		mu.Lock()
		defer mu.Unlock()
		if verb == "set" && isWrite(data) {
			writes++
		}
		return writes < 6 || (verb != "set" && verb != "delete")
	})
	var servers []string
	for i := range 6 {
		servers = append(servers, fmt.Sprintf(`{"name": "S%d", "package": {"type": "npm", "identifier": "s%d"},
		  "transport": {"type": "stdio"}, "env_vars": {"S_API_KEY": {"value": "secret-%d", "is_secret": true}}}`, i, i, i))
	}
	start := time.Now()
	err := e.call("import", model.ConfigImportRequest{Content: `{"servers": [` + strings.Join(servers, ",") + `]}`}, nil)
	took := time.Since(start)
	wantErr(t, err, apierr.ServiceUnavailable, "", "credential service did not answer (set)")
	// The hung set (3 s) and a short wait for the secrets' removal.
	if took > 8*time.Second {
		t.Errorf("the failed import answered after %s", took)
	}
	if got := slugsOf(e.list()); len(got) != 0 {
		t.Fatalf("servers left written by a failed import: %v", got)
	}
	if k := e.keys(bus.BucketSlugs); len(k) != 0 {
		t.Fatalf("slug reservations left by a failed import: %v", k)
	}
	if evs := e.events(); len(evs) != 0 {
		t.Fatalf("events of a failed import: %v", eventTypes(evs))
	}
}
