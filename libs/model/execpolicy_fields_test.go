package model

import (
	"math/rand/v2"
	"strings"
	"testing"
)

func TestEnvNameDenied(t *testing.T) {
	// One row per entry of deniedEnv and deniedEnvPrefixes, and names that stay allowed.
	for name, denied := range map[string]bool{
		"LD_PRELOAD": true, "LD_LIBRARY_PATH": true, "ld_audit": true, "DYLD_INSERT_LIBRARIES": true,
		"NODE_OPTIONS": true, "NODE_PATH": true, "NODE_REPL_EXTERNAL_MODULE": true, "NODE_REDIRECT_WARNINGS": true, "NODE_V8_COVERAGE": true,
		"PYTHONPATH": true, "PYTHONSTARTUP": true, "PERL5OPT": true, "PERL5LIB": true, "PERLLIB": true,
		"RUBYOPT": true, "RUBYLIB": true, "BASH_ENV": true, "ENV": true, "PATH": true, "HOME": true,
		"SHELL": true, "SHELLOPTS": true, "BASHOPTS": true, "IFS": true, "PS4": true, "PROMPT_COMMAND": true, "CDPATH": true,
		"JAVA_TOOL_OPTIONS": true, "_JAVA_OPTIONS": true, "JDK_JAVA_OPTIONS": true, "CLASSPATH": true,
		"GCONV_PATH": true, "LOCPATH": true, "GLIBC_TUNABLES": true, "HOSTALIASES": true, "MALLOC_CONF": true,
		"OPENSSL_CONF": true, "OPENSSL_ENGINES": true, "OPENSSL_MODULES": true, "SSH_ASKPASS": true,
		"TMPDIR": true, "XDG_CONFIG_HOME": true, "XDG_DATA_HOME": true,
		"npm_config_call": true, "NPM_CONFIG_REGISTRY": true, "DOCKER_HOST": true, "GIT_SSH_COMMAND": true,
		"BUN_INSTALL": true, "DENO_DIR": true,
		"GITHUB_TOKEN": false, "API_KEY": false, "NODE_ENV": false, "NODE_EXTRA_CA_CERTS": false, "LOG_LEVEL": false,
		"HOMEPAGE_URL": false, "MY_PATH": false, "ENVIRONMENT": false,
	} {
		if got := EnvNameDenied(name); got != denied {
			t.Errorf("%s: denied %v, want %v", name, got, denied)
		}
	}
	for _, n := range deniedEnv {
		if !EnvNameDenied(n) {
			t.Errorf("%s of deniedEnv is allowed", n)
		}
	}
	for _, p := range deniedEnvPrefixes {
		if !EnvNameDenied(p + "X") {
			t.Errorf("%sX is allowed", p)
		}
	}
}

func TestDockerRunOptions(t *testing.T) {
	p := ExecPolicy{DockerMountPrefixes: []string{"/srv/mcp"}}
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"--rm", "-i", "--init", "--read-only"}, true},
		{[]string{"-e", "FOO=bar", "--env=X"}, true},
		{[]string{"-v", "data:/data", "-v", "/cache", "--volume=/srv/mcp/x:/x:ro"}, true},
		{[]string{"--mount", "type=bind,src=/srv/mcp/a,dst=/a", "--mount=type=volume,source=v,target=/v", "--mount", "type=tmpfs,dst=/t"}, true},
		{[]string{"--network", "none", "--net=bridge", "-u", "1000", "-w", "/app", "--memory", "512m", "--cpus=1", "--pids-limit", "64"}, true},
		{[]string{"--cap-drop=ALL", "--security-opt", "no-new-privileges"}, true},
		{[]string{"--privileged"}, false},
		{[]string{"--pid=host"}, false},
		{[]string{"--pid", "host"}, false},
		{[]string{"--ipc=host"}, false},
		{[]string{"--uts=host"}, false},
		{[]string{"--userns=host"}, false},
		{[]string{"--network", "host"}, false},
		{[]string{"--net=host"}, false},
		{[]string{"--network=container:other"}, false},
		{[]string{"--device", "/dev/sda"}, false},
		{[]string{"--cap-add=SYS_ADMIN"}, false},
		{[]string{"--security-opt", "seccomp=unconfined"}, false},
		{[]string{"--security-opt=apparmor=unconfined"}, false},
		{[]string{"-v", "/:/host"}, false},
		{[]string{"-v", "/srv/mcp/../../etc:/etc2"}, false},
		{[]string{"--volume=/etc:/x"}, false},
		{[]string{"-v", "./rel:/x"}, false},
		{[]string{"--mount", "type=bind,source=/,target=/host"}, false},
		{[]string{"--mount", "type=volume,dst=/x,volume-opt=o=bind,volume-opt=device=/"}, false},
		{[]string{"--mount", "type=image,src=x,dst=/x"}, false},
		// The docker CLI reads --mount as CSV: quoted fields are its
		// fields too ("source=/" binds the host's root).
		{[]string{"--mount", `"type=bind","source=/",target=/host`}, false},
		{[]string{"--mount", `type=volume,"volume-opt=device=/",dst=/x`}, false},
		{[]string{"--mount", "type=BIND,source=/,target=/host"}, false},
		{[]string{"--mount", "TYPE=bind,SRC=/,target=/host"}, false},
		{[]string{"--env-file", "/etc/shadow"}, false},
		{[]string{"--volumes-from", "other"}, false},
		{[]string{"-it"}, false},
		{[]string{"--rm=false"}, false},
		{[]string{"-e"}, false},
		{[]string{"--cgroup-parent=/"}, false},
	} {
		e := p.RefuseDockerArgs(tc.args, "r1")
		if (e == nil) != tc.ok {
			t.Errorf("%q: refused %v, want allowed %v", tc.args, e, tc.ok)
		}
		if e != nil && !strings.HasPrefix(e.Field, "package.runtime_args.") {
			t.Errorf("%q: field %s", tc.args, e.Field)
		}
	}
	if e := (ExecPolicy{}).RefuseDockerArgs([]string{"-v", "/srv/mcp/a:/a"}, "r1"); e == nil || !strings.Contains(e.Message, "--docker-mount-prefixes is not set") {
		t.Fatalf("no prefix, no host mount: %v", e)
	}
}

func TestExecPolicyFields(t *testing.T) {
	npm := func(mod func(*McpConfig)) *McpConfig {
		c := &McpConfig{Package: Package{Type: PackageNPM, Identifier: "@scope/pkg@1.2.3"}, Transport: Transport{Type: TransportStdio}}
		mod(c)
		return c
	}
	p := ExecPolicy{Types: []string{PackageNPM, PackageDocker, PackageHTTP}, KeyfilePrefixes: []string{"/etc/mcp/keys"}}
	for name, tc := range map[string]struct {
		cfg   *McpConfig
		field string // "" allowed
	}{
		"plain":             {npm(func(*McpConfig) {}), ""},
		"hint npx":          {npm(func(c *McpConfig) { c.Package.RuntimeHint = "npx" }), ""},
		"hint path":         {npm(func(c *McpConfig) { c.Package.RuntimeHint = "/tmp/any.sh" }), "package.runtime_hint"},
		"hint sh":           {npm(func(c *McpConfig) { c.Package.RuntimeHint = "sh" }), "package.runtime_hint"},
		"npx -c":            {npm(func(c *McpConfig) { c.Package.RuntimeArgs = []string{"-c"}; c.Package.Identifier = "touch /tmp/x" }), "package.runtime_args.0"},
		"npx --call":        {npm(func(c *McpConfig) { c.Package.RuntimeArgs = []string{"-y", "--call=sh"} }), "package.runtime_args.1"},
		"npx -y":            {npm(func(c *McpConfig) { c.Package.RuntimeArgs = []string{"-y"} }), ""},
		"shell identifier":  {npm(func(c *McpConfig) { c.Package.Identifier = "x; touch /tmp/x" }), "package.identifier"},
		"path identifier":   {npm(func(c *McpConfig) { c.Package.Identifier = "/tmp/evil" }), "package.identifier"},
		"git identifier":    {npm(func(c *McpConfig) { c.Package.Identifier = "github:evil/pkg" }), "package.identifier"},
		"NODE_OPTIONS":      {npm(func(c *McpConfig) { c.EnvVars = map[string]EnvVar{"NODE_OPTIONS": {Value: "--import=data:x"}} }), "env_vars.NODE_OPTIONS"},
		"LD_PRELOAD":        {npm(func(c *McpConfig) { c.EnvVars = map[string]EnvVar{"LD_PRELOAD": {Value: "/tmp/x.so"}} }), "env_vars.LD_PRELOAD"},
		"keyfile allowed":   {npm(func(c *McpConfig) { c.EnvVars = map[string]EnvVar{"K": {KeyfilePath: "/etc/mcp/keys/k"}} }), ""},
		"keyfile elsewhere": {npm(func(c *McpConfig) { c.EnvVars = map[string]EnvVar{"K": {KeyfilePath: "/etc/shadow"}} }), "env_vars.K.keyfile_path"},
		"keyfile dotdot":    {npm(func(c *McpConfig) { c.EnvVars = map[string]EnvVar{"K": {KeyfilePath: "/etc/mcp/keys/../../shadow"}} }), "env_vars.K.keyfile_path"},
		"keyfile relative":  {npm(func(c *McpConfig) { c.EnvVars = map[string]EnvVar{"K": {KeyfilePath: "k"}} }), "env_vars.K.keyfile_path"},
		"docker privileged": {&McpConfig{Package: Package{Type: PackageDocker, Identifier: "mcp/x:1", RuntimeArgs: []string{"--privileged", "-v", "/:/host", "--pid=host"}}, Transport: Transport{Type: TransportStdio}}, "package.runtime_args.0"},
		"docker image opt":  {&McpConfig{Package: Package{Type: PackageDocker, Identifier: "--privileged"}, Transport: Transport{Type: TransportStdio}}, "package.identifier"},
		"docker hint":       {&McpConfig{Package: Package{Type: PackageDocker, Identifier: "mcp/x", RuntimeHint: "podman"}, Transport: Transport{Type: TransportStdio}}, "package.runtime_hint"},
		"docker ok":         {&McpConfig{Package: Package{Type: PackageDocker, Identifier: "ghcr.io/o/x@sha256:" + strings.Repeat("a", 64), RuntimeHint: "docker", RuntimeArgs: []string{"--rm"}}, Transport: Transport{Type: TransportStdio}}, ""},
	} {
		e := p.Refuse(tc.cfg, "r1")
		switch {
		case tc.field == "" && e != nil:
			t.Errorf("%s: refused %v", name, e)
		case tc.field != "" && (e == nil || e.Field != tc.field):
			t.Errorf("%s: got %+v, want a refusal of %s", name, e, tc.field)
		}
	}
	if e := (ExecPolicy{}).Refuse(npm(func(c *McpConfig) { c.EnvVars = map[string]EnvVar{"K": {KeyfilePath: "/k"}} }), "r1"); e == nil ||
		!strings.Contains(e.Message, "--keyfile-prefixes is not set") {
		t.Fatalf("no keyfile without prefixes: %v", e)
	}
}

func TestRefuseInlineSecrets(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg   McpConfig
		field string
	}{
		"url token":    {McpConfig{Transport: Transport{Type: TransportHTTP, URL: "https://h/mcp?token=s3cr3t"}}, "transport.url"},
		"url userinfo": {McpConfig{Transport: Transport{Type: TransportHTTP, URL: "https://user:pw@h/mcp"}}, "transport.url"},
		"url plain":    {McpConfig{Transport: Transport{Type: TransportHTTP, URL: "https://h/mcp?page=2"}}, ""},
		"--api-key=":   {McpConfig{Package: Package{Args: []string{"serve", "--api-key=s3cr3t"}}}, "package.args.1"},
		"--token v":    {McpConfig{Package: Package{Args: []string{"--token", "s3cr3t"}}}, "package.args.1"},
		"--password=":  {McpConfig{Package: Package{Args: []string{"--db-password=x"}}}, "package.args.0"},
		"--secret=":    {McpConfig{Package: Package{Args: []string{"--client-secret=x"}}}, "package.args.0"},
		"docker -e":    {McpConfig{Package: Package{RuntimeArgs: []string{"-e", "API_KEY=s3cr3t"}}}, "package.runtime_args.0"},
		"arg url":      {McpConfig{Package: Package{Args: []string{"postgres://u:pw@db/x"}}}, "package.args.0"},
		"plain args":   {McpConfig{Package: Package{Args: []string{"--port", "80", "--token-file=/x", "-e", "LOG=1"}}}, ""},
		"flag only":    {McpConfig{Package: Package{Args: []string{"--no-token", "--verbose"}}}, ""},
		// Values no secret can be, whatever the option is called.
		"token count":   {McpConfig{Package: Package{Args: []string{"--max-tokens", "4096", "--token-limit=8000"}}}, ""},
		"boolean":       {McpConfig{Package: Package{Args: []string{"--oauth-enabled", "true", "--api-key-required=false"}}}, ""},
		"plain url":     {McpConfig{Package: Package{Args: []string{"--auth-server=https://auth.example.com/", "--token-url", "https://h/oauth/token"}}}, ""},
		"numeric token": {McpConfig{Package: Package{Args: []string{"--token", "4096"}}}, "package.args.1"},
		"secret url":    {McpConfig{Package: Package{Args: []string{"--auth-server=https://u:pw@auth.example.com/"}}}, "package.args.0"},
		"long number":   {McpConfig{Package: Package{Args: []string{"--max-tokens", "12345678901234"}}}, "package.args.1"},
		// A plain env var's value is stored in clear: one shaped like a
		// token is refused; a secret one is moved out (not refused).
		"env token": {McpConfig{EnvVars: map[string]EnvVar{"LOG": {Value: "debug"}, "GH": {Value: ghpToken}}}, "env_vars.GH.value"},
		"env plain": {McpConfig{EnvVars: map[string]EnvVar{"LOG_LEVEL": {Value: "debug"}, "ENABLED": {Value: "true"},
			"ENDPOINT": {Value: "https://api.example.com/v1?page=2"}, "MAX_ITEMS": {Value: "4096"}, "DATA": {Value: "/srv/data"},
			"ID": {Value: "8f14e45fceea167a5a36dedd4bea2543"}, "SK": {Value: "sk-SK"}}}, ""},
		"env secret var":  {McpConfig{EnvVars: map[string]EnvVar{"GH": {Value: ghpToken, IsSecret: true}}}, ""},
		"env secret name": {McpConfig{EnvVars: map[string]EnvVar{"GITHUB_TOKEN": {Value: ghpToken}}}, ""},
		"env secret url":  {McpConfig{EnvVars: map[string]EnvVar{"DB": {Value: "postgres://u:s3cr3t@db/x"}}}, ""},
	} {
		e := RefuseInlineSecrets(&tc.cfg)
		switch {
		case tc.field == "" && e != nil:
			t.Errorf("%s: refused %v", name, e)
		case tc.field != "" && (e == nil || e.Field != tc.field):
			t.Errorf("%s: got %+v, want a refusal of %s", name, e, tc.field)
		}
		if e != nil && strings.Contains(e.Message, "s3cr3t") {
			t.Errorf("%s: the message quotes the secret", name)
		}
	}
}

// ghpToken has the shape of a GitHub token (ghp_ and 36 characters), with
// s3cr3t in it: no message may quote it.
const ghpToken = "ghp_s3cr3t0123456789abcdefghijABCDEFGHIJ"

// shaped returns n characters of alphabet, the same on every run: a token
// body with a real token's spread (the scanner's rules want its entropy).
func shaped(n int, alphabet string) string {
	r := rand.New(rand.NewPCG(uint64(n), uint64(len(alphabet))))
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[r.IntN(len(alphabet))]
	}
	return string(b)
}

func TestSecretValue(t *testing.T) {
	const alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	for _, v := range []string{
		ghpToken, "github_pat_" + shaped(22, alnum) + "_" + shaped(59, alnum), "glpat-" + shaped(20, alnum),
		"xoxb-" + shaped(12, "0123456789") + "-" + shaped(13, "0123456789") + "-" + shaped(24, alnum),
		"sk-proj-" + shaped(74, alnum) + "T3BlbkFJ" + shaped(74, alnum), "sk-ant-api03-" + shaped(93, alnum) + "AA",
		"sk_live_" + shaped(24, alnum), "AIza" + shaped(35, alnum), "npm_" + shaped(36, alnum), "hf_" + shaped(34, letters),
		"mcpbus_0123456789abcdef_" + shaped(43, alnum),
		"SUACSSL3UAHUDXKFSNVUZRF5UHPMWZ6BFDTJ7M6USDXIEDNPPQYYYCU3VY",
		"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
		"-----BEGIN OPENSSH PRIVATE KEY-----\n" + shaped(200, alnum) + "\n-----END OPENSSH PRIVATE KEY-----",
	} {
		if !SecretValue(v) {
			t.Errorf("%.12s… is not taken for a secret", v)
		}
	}
	for _, v := range []string{
		"", "true", "off", "4096", "debug", "https://api.example.com/v1", "/usr/local/bin", "ghp_short", "sk-SK",
		"ghp_" + strings.Repeat("x", 35) + "!", "eyJ.eyJ.x", "SUA", "-----BEGIN CERTIFICATE-----", "8f14e45fceea167a5a36dedd4bea2543",
	} {
		if SecretValue(v) {
			t.Errorf("%q is taken for a secret", v)
		}
	}
}
