package registry_test

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/registry/registry"
	"github.com/mcpbus/mcpbus/services/registry/registrytest"
)

// acceptable checks what config.create will do with the draft: decode it
// strictly from JSON, normalize and validate it.
func acceptable(t *testing.T, plan *model.InstallPlan) *model.McpConfig {
	t.Helper()
	if !plan.Ready || plan.Draft == nil {
		t.Fatalf("plan not ready: missing %v warnings %v", plan.Missing, plan.Warnings)
	}
	raw, err := json.Marshal(model.ConfigCreateRequest{Config: *plan.Draft})
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var req model.ConfigCreateRequest
	if err := dec.Decode(&req); err != nil {
		t.Fatalf("draft does not decode: %v", err)
	}
	cfg := req.Config
	cfg.Normalize()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("draft refused: %v (%s)", err, raw)
	}
	return &cfg
}

func credNames(cs []model.PlanCredential) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Kind + ":" + c.Name
	}
	return out
}

func option(plan *model.InstallPlan, typ string) *model.PlanOption {
	for i := range plan.Options {
		if plan.Options[i].Type == typ {
			return &plan.Options[i]
		}
	}
	return nil
}

func TestPlanNPMWithSecretEnv(t *testing.T) {
	e := start(t, setup{})
	plan := e.get(t, model.RegistryGetRequest{Name: "io.github.domdomegg/airtable-mcp-server"})
	if plan.Source != "official" || plan.Version != "1.7.3" {
		t.Fatalf("plan: %+v", plan)
	}
	p := plan.Package
	if p.Type != "npm" || p.Identifier != "airtable-mcp-server@1.7.3" || p.RuntimeHint != "npx" {
		t.Fatalf("package: %+v", p)
	}
	if !slices.Equal(credNames(plan.Credentials), []string{"env:AIRTABLE_API_KEY"}) || !plan.Credentials[0].Required {
		t.Fatalf("credentials: %+v", plan.Credentials)
	}
	if plan.AuthType != model.AuthAPIKey {
		t.Fatalf("auth: %s", plan.AuthType)
	}
	cfg := acceptable(t, plan)
	ev := cfg.EnvVars["AIRTABLE_API_KEY"]
	if !ev.IsSecret || !ev.Required || ev.SecretRef != "AIRTABLE_API_KEY" || ev.Value != "" {
		t.Fatalf("draft env: %+v", ev)
	}
	if cfg.Slug != "airtable-mcp-server" || cfg.Source.Type != "official" || cfg.Source.Name != "io.github.domdomegg/airtable-mcp-server" ||
		cfg.Source.Version != "1.7.3" || !strings.Contains(cfg.Source.URL, "/v0.1/servers/io.github.domdomegg%2Fairtable-mcp-server/versions/latest") ||
		cfg.Transport.Type != "stdio" || cfg.Package.Identifier != "airtable-mcp-server@1.7.3" || !cfg.Enabled {
		t.Fatalf("draft: %+v", cfg)
	}
	// The oci package could run too; the bundle cannot.
	if o := option(plan, "oci"); o == nil || !o.Usable || o.Chosen {
		t.Fatalf("oci option: %+v", o)
	}
	if o := option(plan, "mcpb"); o == nil || o.Usable || !strings.Contains(o.Reason, "bundles") {
		t.Fatalf("mcpb option: %+v", o)
	}
	if o := option(plan, "npm"); o == nil || !o.Chosen {
		t.Fatalf("npm option: %+v", o)
	}
	// An exact version is fetched by its own URL.
	old := e.get(t, model.RegistryGetRequest{Name: "io.github.domdomegg/airtable-mcp-server", Version: "1.7.2"})
	if old.Package.Identifier != "airtable-mcp-server@1.7.2" || old.Draft.Source.Version != "1.7.2" {
		t.Fatalf("1.7.2: %+v", old.Package)
	}
	// Secrets never travel in variables.
	err := e.getErr(t, model.RegistryGetRequest{Name: "io.github.domdomegg/airtable-mcp-server", Variables: map[string]string{"AIRTABLE_API_KEY": "pat123.secret"}})
	if err.Code != apierr.Validation || err.Field != "variables.AIRTABLE_API_KEY" || strings.Contains(err.Message, "pat123") {
		t.Fatalf("secret in variables: %v", err)
	}
}

func TestPlanFallsBackToDockerWithoutNode(t *testing.T) {
	e := start(t, setup{commands: []string{"docker"}})
	plan := e.get(t, model.RegistryGetRequest{Name: "io.github.domdomegg/airtable-mcp-server"})
	if plan.Package.Type != "docker" || plan.Package.Identifier != "docker.io/domdomegg/airtable-mcp-server:1.7.3" {
		t.Fatalf("package: %+v", plan.Package)
	}
	if o := option(plan, "npm"); o == nil || o.Usable || !strings.Contains(o.Reason, "npx") {
		t.Fatalf("npm option: %+v", o)
	}
	cfg := acceptable(t, plan)
	if cfg.Package.Type != "docker" || cfg.Package.RuntimeHint != "docker" || !cfg.EnvVars["AIRTABLE_API_KEY"].IsSecret {
		t.Fatalf("draft: %+v", cfg)
	}
}

func TestPlanOCIWithRuntimeArguments(t *testing.T) {
	e := start(t, setup{commands: []string{"docker"}})
	name := "io.github.modelcontextprotocol/filesystem"
	// The host path of the mount must come from the user: no draft without it.
	plan := e.get(t, model.RegistryGetRequest{Name: name})
	if plan.Package.Type != "docker" || plan.Ready || plan.Draft != nil || !slices.Equal(plan.Missing, []string{"source_path"}) {
		t.Fatalf("without source_path: %+v", plan)
	}
	plan = e.get(t, model.RegistryGetRequest{Name: name, Variables: map[string]string{"source_path": "/srv/data"}})
	p := plan.Package
	if !slices.Equal(p.RuntimeArgs, []string{"--mount", "type=bind,src=/srv/data,dst=/project"}) || !slices.Equal(p.Args, []string{"/project"}) {
		t.Fatalf("args: runtime %q package %q", p.RuntimeArgs, p.Args)
	}
	cfg := acceptable(t, plan)
	if !slices.Equal(cfg.Package.Args, []string{"/project"}) || cfg.Package.Identifier != "docker.io/mcp/filesystem:1.0.2" ||
		cfg.EnvVars["LOG_LEVEL"].Value != "info" || cfg.AuthType != model.AuthNone {
		t.Fatalf("draft: %+v", cfg)
	}
	if !slices.Equal(cfg.Package.RuntimeArgs, p.RuntimeArgs) {
		t.Fatalf("the draft must carry the runtime arguments: %q", cfg.Package.RuntimeArgs)
	}
	// The container-side default is used, and may be overridden.
	plan = e.get(t, model.RegistryGetRequest{Name: name, Variables: map[string]string{"source_path": "/srv/data", "target_path": "/project/sub"}})
	if plan.Package.RuntimeArgs[1] != "type=bind,src=/srv/data,dst=/project/sub" {
		t.Fatalf("override: %q", plan.Package.RuntimeArgs)
	}
	// A relative or unclean host path is refused.
	for _, bad := range []string{"data", "/srv/../etc"} {
		err := e.getErr(t, model.RegistryGetRequest{Name: name, Variables: map[string]string{"source_path": bad}})
		if err.Code != apierr.Validation || err.Field != "variables.source_path" {
			t.Fatalf("source_path %q: %v", bad, err)
		}
	}
	// With node, the npm package wins; its positional default, a host path
	// of the registry's choosing (/Users/username/Desktop), is not taken:
	// the directory the server may touch is the user's to name.
	e2 := start(t, setup{})
	npm := e2.get(t, model.RegistryGetRequest{Name: name})
	if npm.Package.Type != "npm" || npm.Ready || len(npm.Package.Args) != 0 || !slices.Equal(npm.Missing, []string{"target_dir"}) {
		t.Fatalf("npm: %+v (missing %q)", npm.Package, npm.Missing)
	}
	npm = e2.get(t, model.RegistryGetRequest{Name: name, Variables: map[string]string{"target_dir": "/home/me/notes"}})
	if !slices.Equal(acceptable(t, npm).Package.Args, []string{"/home/me/notes"}) {
		t.Fatalf("npm with target_dir: %+v", npm.Package)
	}
	// prefer picks docker even with node present.
	dk := e2.get(t, model.RegistryGetRequest{Name: name, Prefer: "docker", Variables: map[string]string{"source_path": "/srv"}})
	if dk.Package.Type != "docker" {
		t.Fatalf("prefer docker: %+v", dk.Package)
	}
}

func TestPlanRefusesDangerousRuntimeFlags(t *testing.T) {
	e := start(t, setup{})
	err := e.getErr(t, model.RegistryGetRequest{Name: "io.github.example/database-manager"})
	if err.Code != apierr.NotFound || !strings.Contains(err.Message, "--network") {
		t.Fatalf("--network host: %v", err)
	}
}

func TestPlanRemoteWithSecretHeaderAndURLVariables(t *testing.T) {
	e := start(t, setup{commands: []string{}})
	name := "com.example/acme-analytics"
	plan := e.get(t, model.RegistryGetRequest{Name: name})
	if plan.Ready || !slices.Equal(plan.Missing, []string{"tenant_id"}) || plan.Package.Type != "http" {
		t.Fatalf("without tenant_id: %+v", plan)
	}
	plan = e.get(t, model.RegistryGetRequest{Name: name, Variables: map[string]string{"tenant_id": "us-cell1"}})
	if plan.Package.URL != "https://us-cell1.analytics.example.com/mcp" {
		t.Fatalf("url: %s", plan.Package.URL)
	}
	if !slices.Equal(credNames(plan.Credentials), []string{"header:X-API-Key"}) || !plan.Credentials[0].Required || plan.AuthType != model.AuthAPIKey {
		t.Fatalf("credentials: %+v auth %s", plan.Credentials, plan.AuthType)
	}
	cfg := acceptable(t, plan)
	if cfg.Transport.Type != "http" || cfg.Transport.URL != "https://us-cell1.analytics.example.com/mcp" ||
		cfg.Package.Type != "http" || len(cfg.Transport.Headers) != 0 || cfg.Name != "ACME Analytics" || cfg.Slug != "acme-analytics" {
		t.Fatalf("draft: %+v", cfg)
	}
	// A variable that would change the host or path is refused.
	for _, bad := range []string{"evil.com/x", "a b", "x@y"} {
		err := e.getErr(t, model.RegistryGetRequest{Name: name, Variables: map[string]string{"tenant_id": bad}})
		if err.Code != apierr.Validation || err.Field != "variables.tenant_id" {
			t.Fatalf("tenant_id %q: %v", bad, err)
		}
	}
	if err := e.getErr(t, model.RegistryGetRequest{Name: name, Variables: map[string]string{"tenant_id": "a", "X-API-Key": "k"}}); err.Code != apierr.Validation {
		t.Fatalf("secret header in variables: %v", err)
	}

	// Variables with a default and choices.
	mr := e.get(t, model.RegistryGetRequest{Name: "com.example/multi-region-mcp"})
	if acceptable(t, mr).Transport.URL != "https://api.example.com/us-east-1/mcp" || mr.AuthType != model.AuthNone || len(mr.Credentials) != 0 {
		t.Fatalf("multi-region: %+v", mr)
	}
	mr = e.get(t, model.RegistryGetRequest{Name: "com.example/multi-region-mcp", Variables: map[string]string{"region": "eu-west-1"}})
	if mr.Package.URL != "https://api.example.com/eu-west-1/mcp" {
		t.Fatalf("eu: %s", mr.Package.URL)
	}
	if err := e.getErr(t, model.RegistryGetRequest{Name: "com.example/multi-region-mcp", Variables: map[string]string{"region": "mars-1"}}); err.Code != apierr.Validation || !strings.Contains(err.Message, "us-east-1") {
		t.Fatalf("bad choice: %v", err)
	}
}

func TestPlanHybridPackageOrRemote(t *testing.T) {
	name := "io.modelcontextprotocol.anonymous/hybrid-mcp"
	bare := start(t, setup{commands: []string{}})
	plan := bare.get(t, model.RegistryGetRequest{Name: name})
	if plan.Package.Type != "http" || plan.Package.URL != "https://mcp.anonymous.modelcontextprotocol.io/http" {
		t.Fatalf("no node: %+v", plan.Package)
	}
	cfg := acceptable(t, plan)
	if cfg.Transport.Headers["X-Region"] != "us-east-1" || len(cfg.Transport.Headers) != 1 {
		t.Fatalf("non-secret headers only: %+v", cfg.Transport.Headers)
	}
	if !slices.Equal(credNames(plan.Credentials), []string{"header:X-API-Key"}) {
		t.Fatalf("credentials: %+v", plan.Credentials)
	}
	if o := option(plan, "sse"); o == nil || o.Usable {
		t.Fatalf("sse: %+v", o)
	}
	node := start(t, setup{})
	plan = node.get(t, model.RegistryGetRequest{Name: name})
	if plan.Package.Type != "npm" || !slices.Equal(plan.Package.Args, []string{"--mode", "local"}) || plan.AuthType != model.AuthNone {
		t.Fatalf("node: %+v", plan)
	}
	plan = node.get(t, model.RegistryGetRequest{Name: name, Variables: map[string]string{"mode": "proxy"}})
	if !slices.Equal(acceptable(t, plan).Package.Args, []string{"--mode", "proxy"}) {
		t.Fatalf("mode proxy: %+v", plan.Package)
	}
	plan = node.get(t, model.RegistryGetRequest{Name: name, Prefer: "http", Variables: map[string]string{"X-Region": "eu-west-1"}})
	if plan.Package.Type != "http" || plan.Draft.Transport.Headers["X-Region"] != "eu-west-1" {
		t.Fatalf("prefer http: %+v", plan.Package)
	}
	// A variable the chosen package does not use is reported, not silently dropped.
	plan = node.get(t, model.RegistryGetRequest{Name: name, Variables: map[string]string{"colour": "blue"}})
	if !slices.ContainsFunc(plan.Warnings, func(w string) bool { return strings.Contains(w, "colour") }) {
		t.Fatalf("unused variable: %v", plan.Warnings)
	}
}

func TestPlanRemoteOnlyNoAuth(t *testing.T) {
	e := start(t, setup{})
	plan := e.get(t, model.RegistryGetRequest{Name: "io.github.getcyphrex/cyphrex-mcp"})
	cfg := acceptable(t, plan)
	if plan.AuthType != model.AuthNone || len(plan.Credentials) != 0 || cfg.Transport.URL != "https://mcp.cyphrex.io/mcp" || cfg.Name != "Cyphrex" {
		t.Fatalf("cyphrex: %+v", plan)
	}
	// A deprecated entry is not searchable but can still be installed, with a warning.
	dep := e.get(t, model.RegistryGetRequest{Name: "io.modelcontextprotocol.anonymous/mcp-fs"})
	if !dep.Ready || !slices.ContainsFunc(dep.Warnings, func(w string) bool { return strings.Contains(w, "deprecated") }) {
		t.Fatalf("deprecated: %+v", dep)
	}
}

func TestPlanNothingRunnable(t *testing.T) {
	e := start(t, setup{})
	err := e.getErr(t, model.RegistryGetRequest{Name: "io.github.domdomegg/time-mcp-pypi"})
	if err.Code != apierr.NotFound || !strings.Contains(err.Message, "PyPI") || !strings.Contains(err.Message, "no runnable package") {
		t.Fatalf("pypi: %v", err)
	}
	err = e.getErr(t, model.RegistryGetRequest{Name: "io.github.domdomegg/time-mcp-nuget"})
	if err.Code != apierr.NotFound || !strings.Contains(err.Message, "NuGet") {
		t.Fatalf("nuget: %v", err)
	}
	none := start(t, setup{commands: []string{}})
	err = none.getErr(t, model.RegistryGetRequest{Name: "io.github.domdomegg/airtable-mcp-server"})
	if err.Code != apierr.NotFound || !strings.Contains(err.Message, "npx") || !strings.Contains(err.Message, "docker is not installed") {
		t.Fatalf("no node, no docker: %v", err)
	}
	err = e.getErr(t, model.RegistryGetRequest{Name: "io.github.domdomegg/airtable-mcp-server", Prefer: "http"})
	if err.Code != apierr.NotFound || !strings.Contains(err.Message, "no runnable http package") {
		t.Fatalf("prefer http: %v", err)
	}
}

func TestPlanOAuthDetection(t *testing.T) {
	e := start(t, setup{})
	name := "io.github.acme/github-mcp"
	plan := e.get(t, model.RegistryGetRequest{Name: name})
	if plan.AuthType != model.AuthOAuth || !slices.Equal(plan.Missing, []string{"GITHUB_CLIENT_ID"}) {
		t.Fatalf("oauth: %+v", plan)
	}
	plan = e.get(t, model.RegistryGetRequest{Name: name, Variables: map[string]string{"GITHUB_CLIENT_ID": "Iv1.abc"}})
	cfg := acceptable(t, plan)
	if cfg.AuthType != model.AuthOAuth || cfg.EnvVars["GITHUB_CLIENT_ID"].Value != "Iv1.abc" || cfg.EnvVars["GITHUB_CLIENT_SECRET"].SecretRef != "GITHUB_CLIENT_SECRET" {
		t.Fatalf("draft: %+v", cfg)
	}
}

func TestPlanSnakeCaseEntry(t *testing.T) {
	e := start(t, setup{})
	plan := e.get(t, model.RegistryGetRequest{Name: "io.modelcontextprotocol.anonymous/brave-search"})
	if plan.Package.Identifier != "@modelcontextprotocol/server-brave-search@1.0.2" ||
		!slices.Equal(credNames(plan.Credentials), []string{"env:BRAVE_API_KEY"}) || !plan.Credentials[0].Required {
		t.Fatalf("snake_case: %+v", plan)
	}
	acceptable(t, plan)
}

func TestPlanSmithery(t *testing.T) {
	e := start(t, setup{})
	exa := e.get(t, model.RegistryGetRequest{Name: "exa"}) // registry inferred: no reverse-DNS namespace
	if exa.Source != "smithery" || exa.QualifiedName != "exa" || exa.Package.URL != "https://server.smithery.ai/exa/mcp" {
		t.Fatalf("exa: %+v", exa)
	}
	if !slices.Equal(credNames(exa.Credentials), []string{"config:exaApiKey", "header:Authorization"}) || exa.AuthType != model.AuthAPIKey {
		t.Fatalf("exa credentials: %+v", exa.Credentials)
	}
	if len(exa.Tools) != 1 || exa.Tools[0].Name != "web_search_exa" {
		t.Fatalf("tools: %+v", exa.Tools)
	}
	cfg := acceptable(t, exa)
	if cfg.Source.Type != "smithery" || cfg.Source.QualifiedName != "exa" || cfg.Transport.URL != "https://server.smithery.ai/exa/mcp" || cfg.Name != "Exa Search" {
		t.Fatalf("exa draft: %+v", cfg)
	}

	w := e.get(t, model.RegistryGetRequest{Name: "@acme/weather", Registry: "smithery"})
	if !slices.Equal(credNames(w.Credentials), []string{"header:x-api-key", "header:Authorization"}) || !w.Credentials[0].Required {
		t.Fatalf("weather credentials: %+v", w.Credentials)
	}
	wc := acceptable(t, w)
	var conf map[string]any
	if err := json.Unmarshal(wc.Config, &conf); err != nil || conf["model"] != "gpt-4" || conf["temperature"] != 0.7 || len(conf) != 2 {
		t.Fatalf("weather config: %s %v", wc.Config, err)
	}
	w = e.get(t, model.RegistryGetRequest{Name: "@acme/weather", Variables: map[string]string{"temperature": "0.2"}})
	if err := json.Unmarshal(w.Draft.Config, &conf); err != nil || conf["temperature"] != 0.2 {
		t.Fatalf("typed config value: %s", w.Draft.Config)
	}
	if err := e.getErr(t, model.RegistryGetRequest{Name: "@acme/weather", Variables: map[string]string{"temperature": "warm"}}); err.Code != apierr.Validation {
		t.Fatalf("not a number: %v", err)
	}
	if err := e.getErr(t, model.RegistryGetRequest{Name: "@acme/weather", Variables: map[string]string{"apiKey": "k"}}); err.Code != apierr.Validation {
		t.Fatalf("secret config field in variables: %v", err)
	}

	mem := e.get(t, model.RegistryGetRequest{Name: "@jlia0/servers"})
	if o := option(mem, "stdio"); o == nil || o.Usable || !strings.Contains(o.Reason, "JavaScript") {
		t.Fatalf("stdio connection: %+v", o)
	}
	if string(acceptable(t, mem).Config) != `{"memoryFilePath":"memory.json"}` {
		t.Fatalf("memory config: %s", mem.Draft.Config)
	}

	fetch := e.get(t, model.RegistryGetRequest{Name: "smithery-ai/fetch"})
	if len(fetch.Credentials) == 0 || fetch.Credentials[0].Name != "apiKey" || !fetch.Credentials[0].Required {
		t.Fatalf("fetch: %+v", fetch.Credentials)
	}
}

func TestGetBadInputAndUnknown(t *testing.T) {
	e := start(t, setup{})
	cases := []struct {
		req   model.RegistryGetRequest
		field string
	}{
		{model.RegistryGetRequest{}, "name"},
		{model.RegistryGetRequest{Name: strings.Repeat("a", 201)}, "name"},
		{model.RegistryGetRequest{Name: "io.github.x/y", Registry: "both"}, "registry"},
		{model.RegistryGetRequest{Name: "io.github.x/y", Registry: "npm"}, "registry"},
		{model.RegistryGetRequest{Name: "../../etc/passwd", Registry: "official"}, "name"},
		{model.RegistryGetRequest{Name: "a/b/c", Registry: "smithery"}, "name"},
		// Dot segments would make GET /servers/../admin (with the Smithery key) elsewhere on the host.
		{model.RegistryGetRequest{Name: "../admin", Registry: "smithery"}, "name"},
		{model.RegistryGetRequest{Name: "@acme/..", Registry: "smithery"}, "name"},
		{model.RegistryGetRequest{Name: "..", Registry: "smithery"}, "name"},
		{model.RegistryGetRequest{Name: "../x", Registry: "official"}, "name"},
		{model.RegistryGetRequest{Name: "io.github.x/y", Version: "^1.2.3"}, "version"},
		{model.RegistryGetRequest{Name: "exa", Version: "1.0.0"}, "version"},
		{model.RegistryGetRequest{Name: "exa", Prefer: "pypi"}, "prefer"},
		{model.RegistryGetRequest{Name: "exa", Variables: map[string]string{"a b": "x"}}, "variables"},
		{model.RegistryGetRequest{Name: "exa", Variables: map[string]string{"a": "x\ny"}}, "variables.a"},
	}
	for _, c := range cases {
		err := e.getErr(t, c.req)
		if err.Code != apierr.Validation || err.Field != c.field {
			t.Errorf("%+v: got %v, want VALIDATION_ERROR on %s", c.req, err, c.field)
		}
	}
	if n := e.off.Requests() + e.smi.Requests(); n != 0 {
		t.Fatalf("bad input reached a registry %d times", n)
	}
	if err := e.getErr(t, model.RegistryGetRequest{Name: "io.github.nobody/nothing"}); err.Code != apierr.NotFound || err.Field != "name" {
		t.Fatalf("unknown official: %v", err)
	}
	if err := e.getErr(t, model.RegistryGetRequest{Name: "io.github.domdomegg/airtable-mcp-server", Version: "9.9.9"}); err.Code != apierr.NotFound {
		t.Fatalf("unknown version: %v", err)
	}
	if err := e.getErr(t, model.RegistryGetRequest{Name: "@nobody/nothing"}); err.Code != apierr.NotFound {
		t.Fatalf("unknown smithery: %v", err)
	}
}

// A registry (or a mirror) that answers a get with another entry than the
// one asked for — another server, another version — is not believed: the
// user would install what they did not choose.
func TestGetRefusesAnotherEntryThanAskedFor(t *testing.T) {
	e := start(t, setup{smitheryKey: "k", opts: registry.Options{SmitheryAPIKey: "k"}})
	raw := map[string]json.RawMessage{}
	for _, r := range fixtureOfficial(t) {
		var v struct {
			Server struct{ Name, Version string } `json:"server"`
		}
		if err := json.Unmarshal(r, &v); err != nil {
			t.Fatal(err)
		}
		raw[v.Server.Name+"@"+v.Server.Version] = r
	}
	cases := []struct {
		req  model.RegistryGetRequest
		body json.RawMessage
		want string
	}{
		{model.RegistryGetRequest{Name: "io.github.domdomegg/airtable-mcp-server"}, raw["io.github.modelcontextprotocol/filesystem@1.0.2"], "io.github.modelcontextprotocol/filesystem"},
		{model.RegistryGetRequest{Name: "io.github.domdomegg/airtable-mcp-server", Version: "1.7.2"}, raw["io.github.domdomegg/airtable-mcp-server@1.7.3"], "1.7.3"},
		{model.RegistryGetRequest{Name: "exa", Registry: model.RegistrySmithery}, fixtureSmithery(t).Details["@acme/weather"], "@acme/weather"},
	}
	for _, c := range cases {
		if len(c.body) == 0 {
			t.Fatalf("%+v: no fixture body", c.req)
		}
		if c.req.Registry == model.RegistrySmithery {
			e.smi.SetFault(registrytest.Fault{Body: string(c.body)})
		} else {
			e.off.SetFault(registrytest.Fault{Body: string(c.body)})
		}
		err := e.getErr(t, c.req)
		if err.Code != apierr.ServiceUnavailable || !strings.Contains(err.Message, c.want) {
			t.Errorf("%+v answered with %s: got %v, want SERVICE_UNAVAILABLE naming %s", c.req, c.want, err, c.want)
		}
		e.off.SetFault(registrytest.Fault{})
		e.smi.SetFault(registrytest.Fault{})
	}
	// The same requests answered truly still work.
	if p := e.get(t, model.RegistryGetRequest{Name: "io.github.domdomegg/airtable-mcp-server", Version: "1.7.2"}); p.Version != "1.7.2" {
		t.Fatalf("version 1.7.2: got %s", p.Version)
	}
}
