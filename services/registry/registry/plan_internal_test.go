package registry

import (
	"slices"
	"strings"
	"testing"
)

var anyHost = host{has: func(string) bool { return true }}

// Registry data that must never be run as it is.
func TestPlanRejectsUntrustedRegistryData(t *testing.T) {
	oci := func(args ...Argument) Package {
		return Package{RegistryType: "oci", Identifier: "ghcr.io/acme/tool:1.0", Transport: Remote{Type: "stdio"}, RuntimeArguments: args}
	}
	named := func(name, value string, vars map[string]Input) Argument {
		return Argument{Type: "named", Name: name, Input: Input{Value: value, IsRequired: true, Variables: vars}}
	}
	cases := []struct {
		name   string
		pkg    Package
		vars   map[string]string
		reason string
	}{
		{"host root bind mount", oci(named("-v", "/:/host", nil)), nil, "mount"},
		{"mount source from a registry default",
			oci(named("--mount", "type=bind,src={src},dst=/data", map[string]Input{"src": {Default: "/etc"}})), nil, "mount"},
		{"quoted mount fields (docker reads them as CSV)", oci(named("--mount", `"type=bind","source=/",target=/host`, nil)), nil, "quotes"},
		{"privileged", oci(named("--privileged", "", nil)), nil, "not allowed"},
		{"cap-add", oci(named("--cap-add", "SYS_ADMIN", nil)), nil, "not allowed"},
		{"image reference with a flag", Package{RegistryType: "oci", Identifier: "--privileged", Transport: Remote{Type: "stdio"}}, nil, "image reference"},
		{"image on a loopback registry", Package{RegistryType: "oci", Identifier: "localhost:4222/evil:1", Transport: Remote{Type: "stdio"}}, nil, "public registry host"},
		{"image on the metadata address", Package{RegistryType: "oci", Identifier: "169.254.169.254/latest:1", Transport: Remote{Type: "stdio"}}, nil, "public registry host"},
		{"image on a private registry address", Package{RegistryType: "oci", Identifier: "10.0.0.7:5000/tool:1", Transport: Remote{Type: "stdio"}}, nil, "public registry host"},
		{"image reference with upper case", Package{RegistryType: "oci", Identifier: "Acme/Tool", Transport: Remote{Type: "stdio"}}, nil, "image reference"},
		{"npm name with shell text", Package{RegistryType: "npm", Identifier: "x; rm -rf /", Version: "1.0.0"}, nil, "npm package name"},
		{"npm version range", Package{RegistryType: "npm", Identifier: "x", Version: "^1.0.0"}, nil, "version"},
		{"npm from another registry", Package{RegistryType: "npm", RegistryBaseURL: "https://npm.evil.example", Identifier: "x"}, nil, "only https://registry.npmjs.org"},
		{"npx runtime flag", Package{RegistryType: "npm", Identifier: "x", Version: "1.0.0", RuntimeArguments: []Argument{named("--package", "evil", nil)}}, nil, "not allowed"},
		{"env name", Package{RegistryType: "npm", Identifier: "x", Version: "1.0.0", EnvironmentVariables: []KeyValueInput{{Name: "A=B"}}}, nil, "not valid"},
		{"secret argument", Package{RegistryType: "npm", Identifier: "x", Version: "1.0.0", PackageArguments: []Argument{
			{Type: "named", Name: "--token", Input: Input{IsSecret: true, IsRequired: true}}}}, nil, "secret"},
		{"multi-line argument", Package{RegistryType: "npm", Identifier: "x", Version: "1.0.0", PackageArguments: []Argument{
			{Type: "positional", Input: Input{Value: "a\nb"}}}}, nil, "single line"},
		{"http package transport", Package{RegistryType: "npm", Identifier: "x", Transport: Remote{Type: "streamable-http"}}, nil, "only stdio"},
		// Names the runner would refuse at spawn: the plan says so up front.
		{"LD_PRELOAD", Package{RegistryType: "npm", Identifier: "x", Version: "1.0.0", EnvironmentVariables: []KeyValueInput{{Name: "LD_PRELOAD", Input: Input{Value: "/tmp/x.so"}}}}, nil, "LD_PRELOAD is not allowed"},
		{"NODE_OPTIONS", Package{RegistryType: "npm", Identifier: "x", Version: "1.0.0", EnvironmentVariables: []KeyValueInput{{Name: "node_options", Input: Input{Value: "--require /tmp/x"}}}}, nil, "node_options is not allowed"},
		{"PATH", Package{RegistryType: "npm", Identifier: "x", Version: "1.0.0", EnvironmentVariables: []KeyValueInput{{Name: "PATH", Input: Input{Value: "/tmp"}}}}, nil, "PATH is not allowed"},
		// What runs is fixed at install: npx and docker would otherwise fetch
		// whatever the publisher (or a mirror) made newest at each start.
		{"npm without a version", Package{RegistryType: "npm", Identifier: "x"}, nil, "names no version"},
		{"npm dist-tag", Package{RegistryType: "npm", Identifier: "x", Version: "latest"}, nil, "exact package version"},
		{"npm prerelease tag", Package{RegistryType: "npm", Identifier: "x", Version: "next"}, nil, "exact package version"},
		{"untagged image", Package{RegistryType: "oci", Identifier: "docker.io/acme/tool", Transport: Remote{Type: "stdio"}}, nil, "no fixed version"},
		{"image tagged latest", Package{RegistryType: "oci", Identifier: "docker.io/acme/tool:latest", Transport: Remote{Type: "stdio"}}, nil, "no fixed version"},
		{"image version latest", Package{RegistryType: "oci", Identifier: "docker.io/acme/tool", Version: "latest", Transport: Remote{Type: "stdio"}}, nil, "no fixed version"},
		// A value after a switch would be the next word of the command line:
		// the package npx runs, the image docker runs.
		{"npx -y with a package as value", Package{RegistryType: "npm", Identifier: "x", Version: "1.0.0", RuntimeArguments: []Argument{named("-y", "evil-pkg", nil)}}, nil, "takes no value"},
		{"docker --init with an image as value", oci(named("--init", "localhost:5000/evil:1", nil)), nil, "takes no value"},
		{"publish a host port", oci(named("-p", "0.0.0.0:8080:8080", nil)), nil, "not allowed"},
		// docker run -e NAME (no value) copies NAME from the runner's own
		// environment into the container: npm tokens, proxies, DOCKER_*.
		{"docker -e copying a runner variable", oci(named("-e", "npm_config__authToken", nil)), nil, "runner's own environment"},
		{"docker --env copying a runner variable", oci(named("--env", "HTTPS_PROXY", nil)), nil, "runner's own environment"},
		{"volume driver binding a host path", oci(named("--mount", "type=volume,src=v,dst=/h,volume-opt=type=none,volume-opt=o=bind,volume-opt=device=/etc", nil)), nil, "volume driver"},
	}
	for _, c := range cases {
		a := officialPackage(c.pkg, 0, anyHost, c.vars)
		if a.opt.Usable || !strings.Contains(a.opt.Reason, c.reason) {
			t.Errorf("%s: usable %v, reason %q (want %q)", c.name, a.opt.Usable, a.opt.Reason, c.reason)
		}
	}
	// Switches as the registry writes them, a pinned image by digest.
	for _, ok := range []Package{
		oci(named("--init", "true", nil), Argument{Type: "named", Name: "--read-only", Input: Input{Format: "boolean", Value: "false"}}),
		oci(named("-e", "LOG_LEVEL=debug", nil)),
		{RegistryType: "oci", Identifier: "docker.io/acme/tool@sha256:" + strings.Repeat("ab", 32), Transport: Remote{Type: "stdio"}},
		{RegistryType: "npm", Identifier: "x", Version: "1.2.3-beta.1+build.5", RuntimeArguments: []Argument{{Type: "named", Name: "-y"}}},
	} {
		if a := officialPackage(ok, 0, anyHost, nil); !a.opt.Usable {
			t.Errorf("%s %s: refused: %s", ok.Identifier, ok.Version, a.opt.Reason)
		}
	}
	if a := officialPackage(oci(named("--init", "true", nil)), 0, anyHost, nil); strings.Join(a.pkg.RuntimeArgs, " ") != "--init" {
		t.Errorf("--init true: runtime args %q", a.pkg.RuntimeArgs)
	}
	// A named volume and a user-given bind source are fine.
	a := officialPackage(oci(named("-v", "data:/data", nil)), 0, anyHost, nil)
	if !a.opt.Usable {
		t.Fatalf("named volume: %s", a.opt.Reason)
	}
	a = officialPackage(oci(named("-v", "{src}:/data", map[string]Input{"src": {Format: "filepath"}})), 0, anyHost, map[string]string{"src": "/home/me"})
	if !a.opt.Usable || strings.Join(a.pkg.RuntimeArgs, " ") != "-v /home/me:/data" {
		t.Fatalf("user bind: %v %q", a.opt, a.pkg.RuntimeArgs)
	}

	remotes := []struct {
		r      Remote
		reason string
	}{
		{Remote{Type: "streamable-http", URL: "http://plain.example.com/mcp"}, "https"},
		{Remote{Type: "streamable-http", URL: "https://user:pw@example.com/mcp"}, "https"},
		{Remote{Type: "streamable-http", URL: "https://example.com/{key}/mcp", Variables: map[string]Input{"key": {IsSecret: true}}}, "secret"},
		{Remote{Type: "sse", URL: "https://example.com/sse"}, "Streamable HTTP"},
		{Remote{Type: "streamable-http", URL: "https://example.com/mcp", Headers: []KeyValueInput{{Name: "Bad Header"}}}, "header name"},
	}
	// A registry may not point mcpbus at the host's own or its network's
	// services (cloud metadata, the NATS port, loopback admin ports).
	for _, u := range []string{
		"https://169.254.169.254/latest/meta-data/", "https://[fd00:ec2::254]/latest", "https://localhost:4222/", "https://LOCALHOST./mcp",
		"https://api.localhost/mcp", "https://127.0.0.1:8080/mcp", "https://[::1]/mcp", "https://[::ffff:127.0.0.1]/mcp",
		"https://10.1.2.3/mcp", "https://192.168.0.1/mcp", "https://172.16.0.1/mcp", "https://100.64.0.1/mcp", "https://0.0.0.0/mcp",
		"https://metadata.google.internal/computeMetadata/v1/", "https://printer.local/mcp", "https://2130706433/mcp", "https://0x7f.1/mcp",
	} {
		remotes = append(remotes, struct {
			r      Remote
			reason string
		}{Remote{Type: "streamable-http", URL: u}, "public"})
	}
	remotes = append(remotes, struct {
		r      Remote
		reason string
	}{Remote{Type: "streamable-http", URL: "https://{host}/mcp", Variables: map[string]Input{"host": {Default: "169.254.169.254"}}}, "public"})
	for _, c := range remotes {
		a := officialRemote(c.r, 0, nil)
		if a.opt.Usable || !strings.Contains(a.opt.Reason, c.reason) {
			t.Errorf("%s: usable %v, reason %q (want %q)", c.r.URL, a.opt.Usable, a.opt.Reason, c.reason)
		}
	}
	for _, ok := range []string{"https://mcp.example.com/mcp", "https://93.184.215.14/mcp", "https://[2606:4700::1111]/mcp"} {
		if a := officialRemote(Remote{Type: "streamable-http", URL: ok}, 0, nil); !a.opt.Usable {
			t.Errorf("%s: refused: %s", ok, a.opt.Reason)
		}
	}
	if a := smitheryConnection(SmitheryConnection{Type: "http", DeploymentURL: "https://169.254.169.254/mcp"}, 0, nil); a.opt.Usable || !strings.Contains(a.opt.Reason, "public") {
		t.Errorf("smithery metadata URL: usable %v, reason %q", a.opt.Usable, a.opt.Reason)
	}
	// An env var whose name looks secret is treated as one even when the
	// registry forgot isSecret: its value never lands in the config.
	a = officialPackage(Package{RegistryType: "npm", Identifier: "x", Version: "1.0.0", EnvironmentVariables: []KeyValueInput{
		{Name: "GITHUB_TOKEN", Input: Input{Default: "ghp_example", IsRequired: true}}}}, 0, anyHost, nil)
	if ev := a.env["GITHUB_TOKEN"]; !ev.IsSecret || ev.Value != "" || ev.SecretRef != "GITHUB_TOKEN" || len(a.creds) != 1 {
		t.Fatalf("looks secret: %+v %+v", ev, a.creds)
	}
}

// A registry entry cannot choose host paths for a package run on this host
// (the runner's sandbox grants the paths a config names): a fixed argument
// or environment value naming one makes the option unusable, a default
// naming one is no default, and the same path given by the user is taken.
func TestRegistryChosenHostPathsRefused(t *testing.T) {
	for _, p := range []Package{
		{RegistryType: "npm", Identifier: "evil-mcp", Version: "1.0.0", PackageArguments: []Argument{{Type: "positional", Input: Input{Value: "~/.ssh"}}}},
		{RegistryType: "npm", Identifier: "evil-mcp", Version: "1.0.0", PackageArguments: []Argument{{Type: "named", Name: "--root", Input: Input{Value: "/etc"}}}},
		{RegistryType: "npm", Identifier: "evil-mcp", Version: "1.0.0", EnvironmentVariables: []KeyValueInput{{Name: "CACHE_DIR", Input: Input{Value: "/root/.aws"}}}},
	} {
		if a := officialPackage(p, 0, anyHost, nil); a.opt.Usable || !strings.Contains(a.opt.Reason, "must come from you") {
			t.Errorf("%+v: usable %v (%s), args %q env %v", p, a.opt.Usable, a.opt.Reason, a.pkg.Args, a.env)
		}
	}
	// A default naming a path is no default: the input is the user's to give.
	viaVariable := Package{RegistryType: "npm", Identifier: "evil-mcp", Version: "1.0.0",
		EnvironmentVariables: []KeyValueInput{{Name: "CACHE_DIR", Input: Input{Value: "{base}/.aws", Variables: map[string]Input{"base": {Default: "/root"}}}}}}
	if a := officialPackage(viaVariable, 0, anyHost, nil); a.env["CACHE_DIR"].Value != "" || !slices.Contains(a.missing, "base") {
		t.Fatalf("a path default of a variable: env %v, missing %v", a.env, a.missing)
	}
	withDefault := Package{RegistryType: "npm", Identifier: "fs-mcp", Version: "1.0.0",
		EnvironmentVariables: []KeyValueInput{{Name: "DATA", Input: Input{Default: "/etc/mcpbus", IsRequired: true}}}}
	a := officialPackage(withDefault, 0, anyHost, nil)
	if _, set := a.env["DATA"]; set || !slices.Contains(a.missing, "DATA") {
		t.Fatalf("a registry default path: env %v, missing %v", a.env, a.missing)
	}
	a = officialPackage(withDefault, 0, anyHost, map[string]string{"DATA": "/srv/data"})
	if !a.opt.Usable || a.env["DATA"].Value != "/srv/data" {
		t.Fatalf("the user's path: usable %v (%s), env %v", a.opt.Usable, a.opt.Reason, a.env)
	}
	userArg := Package{RegistryType: "npm", Identifier: "fs-mcp", Version: "1.0.0",
		PackageArguments: []Argument{{Type: "positional", Input: Input{Value: "{dir}", Variables: map[string]Input{"dir": {Format: "filepath", IsRequired: true}}}}}}
	if a := officialPackage(userArg, 0, anyHost, map[string]string{"dir": "/srv/files"}); !a.opt.Usable || !slices.Contains(a.pkg.Args, "/srv/files") {
		t.Fatalf("a path argument from the user: usable %v (%s), args %q", a.opt.Usable, a.opt.Reason, a.pkg.Args)
	}
	// Inside a container a path is the image's, not the host's.
	if a := officialPackage(Package{RegistryType: "oci", Identifier: "docker.io/acme/srv:1", PackageArguments: []Argument{{Type: "positional", Input: Input{Value: "/data"}}}}, 0, anyHost, nil); !a.opt.Usable {
		t.Fatalf("a container path: %s", a.opt.Reason)
	}
}

// Names the registry makes up for inputs (a Smithery config property, an
// argument's valueHint) reach the plan's inputs, warnings and missing list,
// which terminals and pages show and which the user must type back as
// --var NAME=value: a name no variable could have makes the option unusable.
func TestPlanInputNamesFromTheRegistryAreChecked(t *testing.T) {
	const esc = "\x1b]52;c;cHduZWQ=\x07"
	schema := `{"type":"object","required":["` + `k\u001b]52;c;cHduZWQ=\u0007` + `"],"properties":{"` +
		`k\u001b]52;c;cHduZWQ=\u0007` + `":{"type":"string"}}}`
	a := smitheryConnection(SmitheryConnection{Type: "http", DeploymentURL: "https://mcp.example.com/mcp", ConfigSchema: []byte(schema)}, 0, nil)
	if a.opt.Usable || !strings.Contains(a.opt.Reason, "not valid") || strings.Contains(a.opt.Reason, "\x1b") {
		t.Errorf("config field name with an escape: usable %v, reason %q", a.opt.Usable, a.opt.Reason)
	}
	secretSchema := strings.ReplaceAll(schema, `"type":"string"`, `"type":"string","format":"password"`)
	a = smitheryConnection(SmitheryConnection{Type: "http", DeploymentURL: "https://mcp.example.com/mcp", ConfigSchema: []byte(secretSchema)}, 0, nil)
	if a.opt.Usable || strings.Contains(strings.Join(a.warnings, " "), "\x1b") {
		t.Errorf("secret config field name with an escape: usable %v, warnings %q", a.opt.Usable, a.warnings)
	}
	p := Package{RegistryType: "npm", Identifier: "x", Version: "1.0.0", PackageArguments: []Argument{
		{Type: "positional", ValueHint: "dir" + esc, Input: Input{IsRequired: true}}}}
	if a := officialPackage(p, 0, anyHost, nil); a.opt.Usable || strings.Contains(a.opt.Reason, "\x1b") || slices.ContainsFunc(a.missing, func(m string) bool { return strings.Contains(m, "\x1b") }) {
		t.Errorf("valueHint with an escape: usable %v, reason %q, missing %q", a.opt.Usable, a.opt.Reason, a.missing)
	}
	r := Remote{Type: "streamable-http", URL: "https://example.com/{k" + esc + "}/mcp", Variables: map[string]Input{"k" + esc: {IsSecret: true}}}
	if a := officialRemote(r, 0, nil); a.opt.Usable || strings.Contains(a.opt.Reason, "\x1b") {
		t.Errorf("secret URL variable with an escape: usable %v, reason %q", a.opt.Usable, a.opt.Reason)
	}
	// Choices and formats are shown as they are: without control characters.
	p = Package{RegistryType: "npm", Identifier: "x", Version: "1.0.0", EnvironmentVariables: []KeyValueInput{
		{Name: "MODE", Input: Input{Choices: []string{"a" + esc, "b"}, Format: "string" + esc}}}}
	a = officialPackage(p, 0, anyHost, nil)
	for _, in := range a.inputs {
		if strings.Contains(strings.Join(in.Choices, "")+in.Format, "\x1b") {
			t.Errorf("input %s shows %q %q", in.Name, in.Choices, in.Format)
		}
	}
}
