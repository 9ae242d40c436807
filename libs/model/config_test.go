package model_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

func TestDurationJSON(t *testing.T) {
	good := map[string]time.Duration{
		`"30s"`:    30 * time.Second,
		`"1h2m3s"`: time.Hour + 2*time.Minute + 3*time.Second,
		`"250ms"`:  250 * time.Millisecond,
		`"0s"`:     0,
		`"-5s"`:    -5 * time.Second, // parses; Validate rejects it
		`1500`:     1500 * time.Millisecond,
		`0`:        0,
		`-1`:       -time.Millisecond,
	}
	for in, want := range good {
		var d model.Duration
		if err := json.Unmarshal([]byte(in), &d); err != nil {
			t.Errorf("Unmarshal(%s): %v", in, err)
			continue
		}
		if time.Duration(d) != want {
			t.Errorf("Unmarshal(%s) = %v, want %v", in, time.Duration(d), want)
		}
	}
	for _, in := range []string{`"30"`, `"abc"`, `""`, `"1x"`, `1.5`, `true`, `{}`, `[]`, `"30s`, `99999999999999999999`, `9223372036855`, `18446744073709552`, `-9223372036855`} {
		var d model.Duration
		if err := json.Unmarshal([]byte(in), &d); err == nil {
			t.Errorf("Unmarshal(%s) = %v, want an error", in, time.Duration(d))
		}
	}
	b, err := json.Marshal(model.Duration(90 * time.Second))
	if err != nil || string(b) != `"1m30s"` {
		t.Errorf("Marshal = %s, %v", b, err)
	}
	// Inside the config: written as strings, omitted when zero, read back equal.
	rt := model.Runtime{CallTimeout: model.Duration(45 * time.Second)}
	b, err = json.Marshal(rt)
	if err != nil || string(b) != `{"call_timeout":"45s"}` {
		t.Fatalf("Runtime JSON = %s, %v", b, err)
	}
	var back model.Runtime
	if err := json.Unmarshal(b, &back); err != nil || back != rt {
		t.Fatalf("Runtime round trip = %+v, %v", back, err)
	}
	// null (YAML "call_timeout:" with no value) means "not set".
	back = model.Runtime{CallTimeout: model.Duration(time.Second)}
	if err := json.Unmarshal([]byte(`{"call_timeout":null,"start_timeout":"2s"}`), &back); err != nil ||
		back.CallTimeout != model.Duration(time.Second) || back.StartTimeout != model.Duration(2*time.Second) {
		t.Fatalf("null duration: %+v, %v", back, err)
	}
	if got := model.Duration(0).Or(time.Minute); got != time.Minute {
		t.Errorf("Or(zero) = %v", got)
	}
	if got := model.Duration(-time.Second).Or(time.Minute); got != time.Minute {
		t.Errorf("Or(negative) = %v", got)
	}
	if got := model.Duration(time.Second).Or(time.Minute); got != time.Second {
		t.Errorf("Or(set) = %v", got)
	}
}

func TestConfigJSONFieldNames(t *testing.T) {
	c := model.McpConfig{
		ID: "id", Name: "n", Slug: "s", Enabled: true,
		Source:    model.Source{Type: "official", QualifiedName: "io.github/x"},
		Package:   model.Package{Type: "npm", Identifier: "pkg", RuntimeHint: "npx", Args: []string{"-v"}},
		Transport: model.Transport{Type: "stdio"},
		AuthType:  "api_key",
		EnvVars:   map[string]model.EnvVar{"K": {SecretRef: "ref", IsSecret: true, Required: true}},
		Config:    json.RawMessage(`{"a":1}`),
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"id", "name", "slug", "enabled", "source", "package", "transport", "auth_type", "env_vars", "config"} {
		if _, ok := m[k]; !ok {
			t.Errorf("missing %q in %s", k, b)
		}
	}
	for _, k := range []string{"runtime", "created_at", "updated_at", "revision"} {
		if _, ok := m[k]; ok {
			t.Errorf("zero %q not omitted in %s", k, b)
		}
	}
	s := string(b)
	for _, sub := range []string{`"qualified_name":"io.github/x"`, `"runtime_hint":"npx"`, `"secret_ref":"ref"`, `"is_secret":true`, `"required":true`} {
		if !strings.Contains(s, sub) {
			t.Errorf("missing %s in %s", sub, s)
		}
	}
}

// valid returns a config that passes Validate; each case breaks one thing.
func valid() model.McpConfig {
	return model.McpConfig{
		Name: "Filesystem", Slug: "filesystem",
		Source:    model.Source{Type: model.SourceManual},
		Package:   model.Package{Type: model.PackageNPM, Identifier: "@modelcontextprotocol/server-filesystem"},
		Transport: model.Transport{Type: model.TransportStdio},
		AuthType:  model.AuthNone,
	}
}

func TestValidateOK(t *testing.T) {
	ok := []func(*model.McpConfig){
		func(*model.McpConfig) {},
		func(c *model.McpConfig) {
			c.Package.Type = model.PackageDocker
			c.Package.Identifier = "mcp/fetch:latest"
		},
		func(c *model.McpConfig) {
			c.Package.Type = model.PackageBinary
			c.Package.Identifier = "/usr/local/bin/srv"
		},
		func(c *model.McpConfig) {
			c.Transport = model.Transport{Type: model.TransportHTTP, URL: "https://mcp.example.com/mcp", Headers: map[string]string{"Authorization": "Bearer x"}}
			c.Package = model.Package{Type: model.PackageHTTP, Identifier: "https://mcp.example.com/mcp"}
		},
		func(c *model.McpConfig) {
			c.Transport = model.Transport{Type: model.TransportHTTP, URL: "http://127.0.0.1:8080"}
		},
		func(c *model.McpConfig) { c.AuthType = "" },
		func(c *model.McpConfig) { c.AuthType = model.AuthAPIKey },
		func(c *model.McpConfig) { c.AuthType = model.AuthKeyfile },
		func(c *model.McpConfig) { c.AuthType = model.AuthOAuth },
		func(c *model.McpConfig) {
			c.EnvVars = map[string]model.EnvVar{
				"API_KEY":   {SecretRef: "vault:x", IsSecret: true, Required: true},
				"KEYFILE":   {KeyfilePath: "/keys/k.json", Required: true},
				"PLAIN":     {Value: "v", Required: true},
				"OPTIONAL":  {},
				"lowercase": {Value: "ok"},
			}
		},
		func(c *model.McpConfig) {
			c.Runtime = model.Runtime{CallTimeout: model.Duration(time.Minute), StartTimeout: model.Duration(time.Second)}
		},
		func(c *model.McpConfig) { c.Slug = strings.Repeat("a", 64) },
	}
	for i, mod := range ok {
		c := valid()
		mod(&c)
		if err := c.Validate(); err != nil {
			t.Errorf("case %d: %v", i, err)
		}
	}
}

func TestValidateRules(t *testing.T) {
	cases := []struct {
		name    string
		mod     func(*model.McpConfig)
		field   string
		message string
	}{
		// The validation rules of docs/design.md, messages word for word.
		{"empty name", func(c *model.McpConfig) { c.Name = "" }, "name", "Name is required"},
		{"blank name", func(c *model.McpConfig) { c.Name = " \t\n " }, "name", "Name is required"},
		{"no identifier", func(c *model.McpConfig) { c.Package.Identifier = "" }, "package.identifier", "Package identifier required"},
		{"blank identifier", func(c *model.McpConfig) { c.Package.Identifier = "   " }, "package.identifier", "Package identifier required"},
		{"no transport", func(c *model.McpConfig) { c.Transport = model.Transport{} }, "transport", "Transport required"},
		{"required env missing", func(c *model.McpConfig) {
			c.EnvVars = map[string]model.EnvVar{"API_KEY": {Required: true}}
		}, "env_vars.API_KEY", "Missing required credentials"},
		// The checks the runner relies on.
		{"empty slug", func(c *model.McpConfig) { c.Slug = "" }, "slug", "Slug must match [a-z0-9_-]{1,64}"},
		{"upper slug", func(c *model.McpConfig) { c.Slug = "FileSystem" }, "slug", "Slug must match [a-z0-9_-]{1,64}"},
		{"dotted slug", func(c *model.McpConfig) { c.Slug = "a.b" }, "slug", "Slug must match [a-z0-9_-]{1,64}"},
		{"wildcard slug", func(c *model.McpConfig) { c.Slug = "*" }, "slug", "Slug must match [a-z0-9_-]{1,64}"},
		{"long slug", func(c *model.McpConfig) { c.Slug = strings.Repeat("a", 65) }, "slug", "Slug must match [a-z0-9_-]{1,64}"},
		{"slug with the separator", func(c *model.McpConfig) { c.Slug = "a__b" }, "slug", `Slug must not contain "__" nor end in "_": "__" separates the server from the tool in <server>__<tool>`},
		{"slug ending in _", func(c *model.McpConfig) { c.Slug = "a_" }, "slug", `Slug must not contain "__" nor end in "_": "__" separates the server from the tool in <server>__<tool>`},
		{"option identifier", func(c *model.McpConfig) { c.Package.Identifier = "--eval=evil" }, "package.identifier", "Package identifier is not valid"},
		{"newline identifier", func(c *model.McpConfig) { c.Package.Identifier = "pkg\nrm" }, "package.identifier", "Package identifier is not valid"},
		{"NUL identifier", func(c *model.McpConfig) { c.Package.Identifier = "pkg\x00" }, "package.identifier", "Package identifier is not valid"},
		{"CR identifier", func(c *model.McpConfig) { c.Package.Identifier = "pkg\r" }, "package.identifier", "Package identifier is not valid"},
		{"stdio without package type", func(c *model.McpConfig) { c.Package.Type = "" }, "package.type", "A stdio server needs package type npm, docker or binary"},
		{"stdio with http package", func(c *model.McpConfig) { c.Package.Type = model.PackageHTTP }, "package.type", "A stdio server needs package type npm, docker or binary"},
		{"stdio with pip", func(c *model.McpConfig) { c.Package.Type = "pip" }, "package.type", "A stdio server needs package type npm, docker or binary"},
		{"unknown transport", func(c *model.McpConfig) { c.Transport.Type = "sse" }, "transport.type", "Transport type must be stdio or http"},
		{"http without URL", func(c *model.McpConfig) { c.Transport = model.Transport{Type: model.TransportHTTP} }, "transport.url", "An http transport needs an http(s) URL"},
		{"http ftp URL", func(c *model.McpConfig) { c.Transport = model.Transport{Type: model.TransportHTTP, URL: "ftp://x/y"} }, "transport.url", "An http transport needs an http(s) URL"},
		{"http no host", func(c *model.McpConfig) {
			c.Transport = model.Transport{Type: model.TransportHTTP, URL: "http:///path"}
		}, "transport.url", "An http transport needs an http(s) URL"},
		{"http relative", func(c *model.McpConfig) {
			c.Transport = model.Transport{Type: model.TransportHTTP, URL: "mcp.example.com/mcp"}
		}, "transport.url", "An http transport needs an http(s) URL"},
		{"http bad URL", func(c *model.McpConfig) { c.Transport = model.Transport{Type: model.TransportHTTP, URL: "http://[::1"} }, "transport.url", "An http transport needs an http(s) URL"},
		{"bad auth", func(c *model.McpConfig) { c.AuthType = "basic" }, "auth_type", "Auth type must be none, api_key, keyfile or oauth"},
		{"empty env name", func(c *model.McpConfig) { c.EnvVars = map[string]model.EnvVar{"": {Value: "x"}} }, "env_vars", "Environment variable names must be non-empty and contain no '='"},
		{"env name with =", func(c *model.McpConfig) { c.EnvVars = map[string]model.EnvVar{"A=B": {Value: "x"}} }, "env_vars", "Environment variable names must be non-empty and contain no '='"},
		{"env name with NUL", func(c *model.McpConfig) { c.EnvVars = map[string]model.EnvVar{"A\x00": {Value: "x"}} }, "env_vars", "Environment variable names must be non-empty and contain no '='"},
		{"negative call timeout", func(c *model.McpConfig) { c.Runtime.CallTimeout = model.Duration(-time.Second) }, "runtime", "Timeouts must not be negative"},
		{"negative start timeout", func(c *model.McpConfig) { c.Runtime.StartTimeout = -1 }, "runtime", "Timeouts must not be negative"},
		{"bad secret_scan arguments", func(c *model.McpConfig) { c.SecretScan.Arguments = "warn" }, "secret_scan.arguments", "secret_scan.arguments must be block, redact or off"},
		{"bad secret_scan results", func(c *model.McpConfig) { c.SecretScan.Results = "Block" }, "secret_scan.results", "secret_scan.results must be block, redact or off"},
		// Input the runner or the CLI would trip on later, refused at save.
		{"name with an escape", func(c *model.McpConfig) { c.Name = "A\x1b[31m" }, "name", "Name must not contain control characters"},
		{"name with NUL", func(c *model.McpConfig) { c.Name = "A\x00" }, "name", "Name must not contain control characters"},
		{"unknown source", func(c *model.McpConfig) { c.Source.Type = "bogus" }, "source.type", "source.type must be manual, official or smithery"},
		{"http with an unknown package type", func(c *model.McpConfig) {
			c.Transport = model.Transport{Type: model.TransportHTTP, URL: "https://mcp.example.com/mcp"}
			c.Package.Type = "bogus"
		}, "package.type", "package.type must be npm, docker, binary or http"},
		{"header value with a line break", func(c *model.McpConfig) {
			c.Transport = model.Transport{Type: model.TransportHTTP, URL: "https://mcp.example.com/mcp", Headers: map[string]string{"X-A": "b\r\nEvil: 1"}}
		}, "transport.headers.X-A", "the header value is not valid: no line breaks or control characters"},
		{"header name with a space", func(c *model.McpConfig) {
			c.Transport = model.Transport{Type: model.TransportHTTP, URL: "https://mcp.example.com/mcp", Headers: map[string]string{"Bad Name": "x"}}
		}, "transport.headers.Bad Name", `"Bad Name" is not a valid HTTP header name`},
		{"secret header name with a space", func(c *model.McpConfig) {
			c.Transport = model.Transport{Type: model.TransportHTTP, URL: "https://mcp.example.com/mcp", SecretHeaders: []string{"Bad Header"}}
		}, "transport.secret_headers.0", `"Bad Header" is not a valid HTTP header name`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := valid()
			tc.mod(&c)
			err := c.Validate()
			if err == nil {
				t.Fatal("Validate passed")
			}
			if err.Code != apierr.Validation || err.Field != tc.field || err.Message != tc.message {
				t.Fatalf("got %s %q %q, want VALIDATION_ERROR %q %q", err.Code, err.Field, err.Message, tc.field, tc.message)
			}
		})
	}
}

func TestNormalize(t *testing.T) {
	c := model.McpConfig{Name: "  GitHub Server  ", Transport: model.Transport{Type: model.TransportHTTP, URL: "https://api.example.com/mcp"}}
	c.Normalize()
	want := model.McpConfig{
		Name: "GitHub Server", Slug: "github-server",
		Source:    model.Source{Type: model.SourceManual},
		Package:   model.Package{Type: model.PackageHTTP, Identifier: "https://api.example.com/mcp"},
		Transport: model.Transport{Type: model.TransportHTTP, URL: "https://api.example.com/mcp"},
		AuthType:  model.AuthNone,
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("Normalize = %+v\nwant        %+v", c, want)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("normalized http config invalid: %v", err)
	}
	// Idempotent.
	again := c
	again.Normalize()
	if !reflect.DeepEqual(again, c) {
		t.Fatalf("second Normalize changed %+v", again)
	}

	// Explicit values are kept.
	k := model.McpConfig{
		Name: "X", Slug: "custom", Source: model.Source{Type: model.SourceOfficial},
		Package:   model.Package{Type: model.PackageNPM, Identifier: "pkg"},
		Transport: model.Transport{Type: model.TransportHTTP, URL: "https://h/mcp"}, AuthType: model.AuthOAuth,
	}
	k.Normalize()
	if k.Slug != "custom" || k.Source.Type != model.SourceOfficial || k.Package.Type != model.PackageNPM ||
		k.Package.Identifier != "pkg" || k.AuthType != model.AuthOAuth {
		t.Fatalf("Normalize overwrote explicit values: %+v", k)
	}
	// An HTTP package keeps its own identifier; a stdio transport does not get an HTTP package.
	h := model.McpConfig{Name: "h", Package: model.Package{Type: model.PackageHTTP, Identifier: "id"}, Transport: model.Transport{Type: model.TransportHTTP, URL: "https://u"}}
	h.Normalize()
	if h.Package.Identifier != "id" {
		t.Fatalf("identifier = %q", h.Package.Identifier)
	}
	s := model.McpConfig{Name: "日本語", Transport: model.Transport{Type: model.TransportStdio}}
	s.Normalize()
	// A name of no ASCII letter gets a slug of its hash (TestNormalizeNonASCIIName).
	if s.Package.Type != "" || !strings.HasPrefix(s.Slug, "server-") {
		t.Fatalf("stdio normalize: %+v", s)
	}
	if err := s.Validate(); err == nil || err.Field != "package.identifier" {
		t.Fatalf("a stdio config without a package must fail on it: %v", err)
	}
	// A missing name is rejected after Normalize too.
	n := model.McpConfig{Package: model.Package{Type: "npm", Identifier: "p"}, Transport: model.Transport{Type: "stdio"}}
	n.Normalize()
	if err := n.Validate(); err == nil || err.Message != "Name is required" {
		t.Fatalf("missing name: %v", err)
	}
}

func FuzzConfigJSON(f *testing.F) {
	for _, s := range []string{
		`{"name":"Filesystem","package":{"type":"npm","identifier":"@modelcontextprotocol/server-filesystem","args":["/tmp"]},"transport":{"type":"stdio"}}`,
		`{"name":"Remote","transport":{"type":"http","url":"https://mcp.example.com/mcp","headers":{"Authorization":"Bearer x"}}}`,
		`{"name":"D","package":{"type":"docker","identifier":"mcp/fetch"},"transport":{"type":"stdio"},"runtime":{"call_timeout":"1m","start_timeout":5000}}`,
		`{"name":"E","slug":"e","package":{"type":"binary","identifier":"srv"},"transport":{"type":"stdio"},"auth_type":"api_key","env_vars":{"API_KEY":{"secret_ref":"r","is_secret":true,"required":true}}}`,
		`{"name":"bad","env_vars":{"":{"required":true}},"runtime":{"call_timeout":"-1s"}}`,
		`{"name":"t","created_at":"2024-01-02T03:04:05Z","updated_at":"9999-12-31T23:59:59+14:00","revision":18446744073709551615}`,
		`{"name":"c","config":{"nested":[1,2,{"x":null}]},"runtime":{"call_timeout":null}}`,
		`{"name":"x","transport":{"type":"http","url":"http://[::1"}}`,
		`{"name":"\u0000","slug":"\ud800","package":{"identifier":"-x"}}`,
		`{"runtime":{"call_timeout":"9223372036854775807ns"},"name":"big"}`,
		`{"runtime":{"call_timeout":9223372036854775807}}`,
		`{"env_vars":null,"config":null,"package":null}`,
		`[]`, `null`, `{`, ``, `"str"`, `{"name":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var c model.McpConfig
		if err := json.Unmarshal(data, &c); err != nil {
			return
		}
		c.Normalize()
		once := c
		c.Normalize()
		if !reflect.DeepEqual(once, c) {
			t.Fatalf("Normalize not idempotent: %+v vs %+v", once, c)
		}
		err := c.Validate()
		if err != nil {
			if err.Code != apierr.Validation || err.Message == "" || err.Field == "" {
				t.Fatalf("Validate error %+v", err)
			}
			return
		}
		if strings.TrimSpace(c.Name) == "" || !model.ValidSlug(c.Slug) || strings.TrimSpace(c.Package.Identifier) == "" {
			t.Fatalf("Validate passed %+v", c)
		}
		// A valid config stays valid through a store round trip (when it can be stored at all).
		b, merr := json.Marshal(c)
		if merr != nil {
			return
		}
		var back model.McpConfig
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("re-decoding %s: %v", b, err)
		}
		if err := back.Validate(); err != nil {
			t.Fatalf("valid config invalid after round trip: %v (%s)", err, b)
		}
	})
}

// A required secret variable without a value is valid here: its value lives
// in the credential service, where the config service checks it.
func TestRequiredSecretWithoutValueIsValid(t *testing.T) {
	c := model.McpConfig{Name: "x", Package: model.Package{Type: model.PackageNPM, Identifier: "pkg"},
		Transport: model.Transport{Type: model.TransportStdio},
		EnvVars:   map[string]model.EnvVar{"API_KEY": {Required: true, IsSecret: true}}}
	c.Normalize()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}
