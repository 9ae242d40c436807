package launch

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// --- environment ---

func TestChildEnv(t *testing.T) {
	base := []string{
		"PATH=/usr/bin:/bin", "HOME=/home/runner", "LANG=C.UTF-8", "TZ=UTC",
		"NODE_OPTIONS=--max-old-space-size=4096", "NODE_EXTRA_CA_CERTS=/etc/ca.pem", "NPM_CONFIG_REGISTRY=https://r",
		"npm_config_cache=/tmp/npm", "XDG_CACHE_HOME=/cache", "DOCKER_HOST=unix:///run/docker.sock", "https_proxy=http://proxy:3128",
		// Secrets of the runner itself: never handed to a child.
		"VAULT_TOKEN=hvs.secret", "VAULT_ADDR=https://vault:8200", "AWS_SECRET_ACCESS_KEY=aws-secret", "AWS_ACCESS_KEY_ID=AKIA",
		"GITHUB_TOKEN=ghp_runner", "NATS_CREDS=/creds", "OTEL_EXPORTER_OTLP_HEADERS=authorization=x", "DATABASE_URL=postgres://u:p@h/db",
		// Look-alikes and junk.
		"PATHX=/evil", "path=/lower", "NODE=not-a-prefix-match", "MALFORMED", "=novalue", "",
	}
	env := map[string]string{
		"API_KEY":    "cfg-secret",
		"PATH":       "/custom/bin", // a loader hook: the base's stays
		"LD_PRELOAD": "/evil.so",
		"EMPTY":      "",
		"WITH_EQ":    "a=b=c",
	}
	got := ChildEnv(base, env)
	want := []string{
		"API_KEY=cfg-secret", "DOCKER_HOST=unix:///run/docker.sock", "EMPTY=", "HOME=/home/runner", "LANG=C.UTF-8",
		"NODE_EXTRA_CA_CERTS=/etc/ca.pem", "NODE_OPTIONS=--max-old-space-size=4096", "NPM_CONFIG_REGISTRY=https://r",
		"PATH=/usr/bin:/bin", "TZ=UTC", "WITH_EQ=a=b=c", "XDG_CACHE_HOME=/cache", "https_proxy=http://proxy:3128",
		"npm_config_cache=/tmp/npm",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("ChildEnv =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !slices.IsSorted(got) {
		t.Fatal("not sorted")
	}
	joined := strings.Join(got, "\n")
	for _, secret := range []string{"hvs.secret", "aws-secret", "ghp_runner", "VAULT_", "AWS_", "/evil", "postgres://"} {
		if strings.Contains(joined, secret) {
			t.Errorf("child env leaks %q", secret)
		}
	}
	if e := ChildEnv(nil, nil); len(e) != 0 {
		t.Errorf("ChildEnv(nil, nil) = %v", e)
	}
	// Stable for the same input.
	if again := ChildEnv(base, env); !slices.Equal(again, got) {
		t.Error("not reproducible")
	}
}

func FuzzChildEnv(f *testing.F) {
	f.Add("PATH=/bin\x00VAULT_TOKEN=x\x00NODE_OPTIONS=a=b", "API_KEY", "v")
	f.Add("=\x00==\x00PATH", "PATH", "")
	f.Add("HOME=/h\x00HOME=/other", "", "x")
	f.Fuzz(func(t *testing.T, baseList, key, value string) {
		base := strings.Split(baseList, "\x00")
		env := map[string]string{}
		if key != "" && !strings.Contains(key, "=") {
			env[key] = value
		}
		got := ChildEnv(base, env)
		if !slices.IsSorted(got) {
			t.Fatalf("not sorted: %q", got)
		}
		seen := map[string]bool{}
		for _, kv := range got {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || seen[k] {
				t.Fatalf("bad or duplicate entry %q in %q", kv, got)
			}
			seen[k] = true
			if cv, isCfg := env[k]; isCfg {
				if v != cv {
					t.Fatalf("config value of %s lost: %q", k, v)
				}
				continue
			}
			if !slices.Contains(inheritedEnv, k) && !hasAnyPrefix(k, inheritedPrefixes) {
				t.Fatalf("disallowed %q passed through", kv)
			}
		}
	})
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// --- stderr tail ---

func TestTail(t *testing.T) {
	var lines []string
	tl := newTail(16, func(l string) { lines = append(lines, l) })
	write := func(s string) {
		t.Helper()
		if n, err := tl.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	write("hello\nwor")
	if !slices.Equal(lines, []string{"hello"}) {
		t.Fatalf("lines = %q", lines)
	}
	write("ld\r\npartial")
	if !slices.Equal(lines, []string{"hello", "world"}) {
		t.Fatalf("lines = %q (CRLF must be trimmed, partial line held back)", lines)
	}
	if got, want := tl.String(), "o\nworld\r\npartial"; got != want {
		t.Fatalf("String = %q, want the last 16 bytes %q", got, want)
	}
	write(" line\n\n\r\n")
	if !slices.Equal(lines, []string{"hello", "world", "partial line", "", ""}) {
		t.Fatalf("lines = %q", lines)
	}
	// Only trailing CRs go; a CR inside a line stays.
	write("a\rb\r\r\n")
	if lines[len(lines)-1] != "a\rb" {
		t.Fatalf("last line = %q", lines[len(lines)-1])
	}
	if len(tl.String()) != 16 {
		t.Fatalf("tail is %d bytes", len(tl.String()))
	}

	// A runaway line with no newline is dropped, not buffered forever.
	lines = nil
	write(strings.Repeat("x", 40))
	write("end\n")
	if len(lines) != 1 || len(lines[0]) > 16 || lines[0] != "end" {
		t.Fatalf("after a runaway line: %q", lines)
	}
	if got := tl.String(); got != strings.Repeat("x", 12)+"end\n" {
		t.Fatalf("String = %q", got)
	}

	// No callback: only the tail is kept.
	quiet := newTail(4, nil)
	_, _ = quiet.Write([]byte("abc\ndef\n"))
	if quiet.String() != "def\n" {
		t.Fatalf("quiet tail = %q", quiet.String())
	}
}

func TestTailConcurrent(t *testing.T) {
	var mu sync.Mutex
	n := 0
	tl := newTail(64, func(string) { mu.Lock(); n++; mu.Unlock() })
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				_, _ = tl.Write([]byte("line of text\n"))
				_ = tl.String()
			}
		}()
	}
	wg.Wait()
	if n != 800 || len(tl.String()) != 64 {
		t.Fatalf("%d lines, tail %d bytes", n, len(tl.String()))
	}
}

func FuzzTail(f *testing.F) {
	f.Add([]byte("hello\nworld\r\n"), []byte("partial"), uint8(8))
	f.Add([]byte("\r\n\r\n"), []byte("\n"), uint8(1))
	f.Add([]byte(strings.Repeat("x", 300)), []byte("\n"), uint8(16))
	f.Fuzz(func(t *testing.T, a, b []byte, max uint8) {
		m := int(max) + 1
		var lines []string
		tl := newTail(m, func(l string) { lines = append(lines, l) })
		_, _ = tl.Write(a)
		_, _ = tl.Write(b)
		all := append(append([]byte{}, a...), b...)
		want := all
		if len(want) > m {
			want = want[len(want)-m:]
		}
		if got := tl.String(); got != string(want) {
			t.Fatalf("String = %q, want %q", got, want)
		}
		if len(lines) > bytes.Count(all, []byte("\n")) {
			t.Fatalf("%d lines from %d newlines", len(lines), bytes.Count(all, []byte("\n")))
		}
		for _, l := range lines {
			if strings.Contains(l, "\n") || strings.HasSuffix(l, "\r") {
				t.Fatalf("line %q", l)
			}
		}
		// Short lines (under the limit, in one write) always come through whole.
		if len(a) < m && bytes.Count(a, []byte("\n")) > 0 && len(lines) == 0 {
			t.Fatalf("no line from %q", a)
		}
	})
}

// --- Prepare ---

func wantCode(t *testing.T, err error, code apierr.Code, message string) *apierr.Error {
	t.Helper()
	var e *apierr.Error
	if !errors.As(err, &e) {
		t.Fatalf("want %s, got %T %v", code, err, err)
	}
	if e.Code != code || (message != "" && e.Message != message) {
		t.Fatalf("want %s %q, got %s %q", code, message, e.Code, e.Message)
	}
	return e
}

func stdio(pkgType, identifier string, args ...string) *model.McpConfig {
	return &model.McpConfig{
		Name: "t", Slug: "t",
		Package:   model.Package{Type: pkgType, Identifier: identifier, Args: args},
		Transport: model.Transport{Type: model.TransportStdio},
	}
}

// script writes an executable shell script into dir.
func script(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPrepareBinary(t *testing.T) {
	ctx := context.Background()
	_, err := Prepare(ctx, stdio(model.PackageBinary, "mcpbus-no-such-binary-4f1c"), nil, Options{})
	e := wantCode(t, err, apierr.NotFound, "Package not found")
	if e.Field != "package.identifier" || !errors.Is(err, exec.ErrNotFound) {
		t.Fatalf("field %q, cause %v", e.Field, errors.Unwrap(err))
	}
	_, err = Prepare(ctx, stdio(model.PackageBinary, filepath.Join(t.TempDir(), "missing")), nil, Options{})
	wantCode(t, err, apierr.NotFound, "Package not found")
	// A file that exists but is not executable is not a package either.
	plain := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(plain, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Prepare(ctx, stdio(model.PackageBinary, plain), nil, Options{})
	wantCode(t, err, apierr.NotFound, "Package not found")

	t.Setenv("VAULT_TOKEN", "hvs.runner-secret")
	bin := script(t, t.TempDir(), "srv", "exit 0")
	l, err := Prepare(ctx, stdio(model.PackageBinary, bin, "--stdio", "-v"), map[string]string{"API_KEY": "k"}, Options{StderrBytes: 10})
	if err != nil {
		t.Fatal(err)
	}
	ct, ok := l.Transport.(*StdioTransport)
	if !ok || l.Process == nil || ct.Command != l.Process.cmd {
		t.Fatalf("transport %T, process %v", l.Transport, l.Process)
	}
	cmd := l.Process.cmd
	if !slices.Equal(cmd.Args, []string{bin, "--stdio", "-v"}) {
		t.Fatalf("args %q", cmd.Args)
	}
	if !slices.Contains(cmd.Env, "API_KEY=k") || slices.ContainsFunc(cmd.Env, func(s string) bool { return strings.HasPrefix(s, "VAULT_TOKEN=") }) {
		t.Fatalf("env %q", cmd.Env)
	}
	if cmd.SysProcAttr == nil || !cmd.SysProcAttr.Setsid {
		t.Fatal("child not in its own session (so process group)")
	}
	if l.Process.PID() != 0 || l.Process.stderr.max != 10 {
		t.Fatalf("pid %d, stderr max %d", l.Process.PID(), l.Process.stderr.max)
	}
}

func TestPrepareNPM(t *testing.T) {
	ctx := context.Background()
	missing := filepath.Join(t.TempDir(), "npx")
	_, err := Prepare(ctx, stdio(model.PackageNPM, "@modelcontextprotocol/server-everything"), nil, Options{NpxPath: missing})
	e := wantCode(t, err, apierr.ServiceUnavailable, "")
	if !strings.Contains(e.Message, "Node.js is not installed") {
		t.Fatalf("message %q", e.Message)
	}
	_, err = Prepare(ctx, stdio(model.PackageNPM, "pkg"), nil, Options{NpxPath: "mcpbus-no-such-npx-4f1c"})
	wantCode(t, err, apierr.ServiceUnavailable, "")
	// A runtime hint never names the command (issue 27: a hint of
	// /path/any.sh ran that script): npx runs the package.
	hinted := stdio(model.PackageNPM, "pkg")
	hinted.Package.RuntimeHint = "/bin/sh"
	l, err := Prepare(ctx, hinted, nil, Options{NpxPath: "true"})
	if err != nil || filepath.Base(l.Process.cmd.Path) != "true" {
		t.Fatalf("hinted: %v %v", l, err)
	}

	npx := script(t, t.TempDir(), "npx", "exit 0")
	cfg := stdio(model.PackageNPM, "@scope/pkg@1.2.3", "/data", "--flag")
	cfg.Package.RuntimeHint = "npx"
	cfg.Package.RuntimeArgs = []string{"--prefer-offline"}
	l, err = Prepare(ctx, cfg, nil, Options{NpxPath: npx})
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Process.cmd.Args; !slices.Equal(got, []string{npx, "-y", "--prefer-offline", "@scope/pkg@1.2.3", "/data", "--flag"}) {
		t.Fatalf("args %q", got)
	}
}

func TestPrepareDocker(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()

	_, err := Prepare(ctx, stdio(model.PackageDocker, "mcp/fetch"), nil, Options{DockerPath: filepath.Join(dir, "docker")})
	wantCode(t, err, apierr.ServiceUnavailable, "Docker not installed")
	_, err = Prepare(ctx, stdio(model.PackageDocker, "mcp/fetch"), nil, Options{DockerPath: "mcpbus-no-such-docker-4f1c"})
	wantCode(t, err, apierr.ServiceUnavailable, "Docker not installed")

	// A client without a daemon: `docker version` fails.
	noDaemon := script(t, dir, "docker-nodaemon", `echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?" >&2; exit 1`)
	_, err = Prepare(ctx, stdio(model.PackageDocker, "mcp/fetch"), nil, Options{DockerPath: noDaemon})
	wantCode(t, err, apierr.ServiceUnavailable, "Docker not running")

	// A working client: the image runs with the config's variables passed by name.
	ok := script(t, dir, "docker-ok", `[ "$1" = version ] && echo 27.0.0; exit 0`)
	env := map[string]string{"ZED": "z", "API_KEY": "secret-value"}
	img := stdio(model.PackageDocker, "ghcr.io/org/img:1", "--port", "0")
	img.Package.RuntimeArgs = []string{"--mount", "type=bind,src=/srv,dst=/data"}
	l, err := Prepare(ctx, img, env, Options{DockerPath: ok})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{ok, "run", "--rm", "-i", "-e", "API_KEY", "-e", "ZED", "--mount", "type=bind,src=/srv,dst=/data", "ghcr.io/org/img:1", "--port", "0"}
	if got := l.Process.cmd.Args; !slices.Equal(got, want) {
		t.Fatalf("args %q, want %q", got, want)
	}
	if strings.Contains(strings.Join(l.Process.cmd.Args, " "), "secret-value") {
		t.Fatal("secret value on the command line")
	}
	if !slices.Contains(l.Process.cmd.Env, "API_KEY=secret-value") {
		t.Fatalf("env %q", l.Process.cmd.Env)
	}
}

// TestPrepareRealDockerClient uses the docker client of this machine, which
// has no daemon (here and in CI); without a client a fake stands in.
func TestPrepareRealDockerClient(t *testing.T) {
	docker := "docker"
	if _, err := exec.LookPath(docker); err != nil {
		docker = script(t, t.TempDir(), "docker", "echo 'Cannot connect to the Docker daemon' >&2; exit 1")
	}
	l, err := Prepare(context.Background(), stdio(model.PackageDocker, "mcp/fetch"), nil, Options{DockerPath: docker})
	if err == nil {
		t.Skipf("a docker daemon is reachable here (prepared %v); this test needs none", l.Process.cmd.Args)
	}
	wantCode(t, err, apierr.ServiceUnavailable, "Docker not running")
}

func TestPrepareUnknownType(t *testing.T) {
	_, err := Prepare(context.Background(), stdio("pip", "x"), nil, Options{})
	if e := wantCode(t, err, apierr.Validation, ""); e.Field != "package.type" {
		t.Fatalf("field %q", e.Field)
	}
}

func TestPrepareHTTPHeaders(t *testing.T) {
	type seen struct{ auth, key, ua, own string }
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"), r.Header.Get("User-Agent"), r.Header.Get("X-Own")}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()

	cfg := &model.McpConfig{
		Name: "remote", Slug: "remote",
		Package: model.Package{Type: model.PackageHTTP, Identifier: srv.URL + "/mcp"},
		Transport: model.Transport{Type: model.TransportHTTP, URL: srv.URL + "/mcp", Headers: map[string]string{
			"Authorization": "Bearer sekrit", "x-api-key": "k-123",
		}},
	}
	l, err := Prepare(context.Background(), cfg, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Process != nil {
		t.Fatal("an HTTP server has no process")
	}
	ht, ok := l.Transport.(*HTTPTransport)
	if !ok {
		t.Fatalf("transport %T", l.Transport)
	}
	st := ht.StreamableClientTransport
	if st.Endpoint != srv.URL+"/mcp" || st.HTTPClient == nil {
		t.Fatalf("transport %T %+v", l.Transport, l.Transport)
	}
	req, err := http.NewRequest(http.MethodPost, st.Endpoint, strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Own", "mine")
	req.Header.Set("Authorization", "Bearer overridden")
	resp, err := st.HTTPClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	s := <-got
	if s.auth != "Bearer sekrit" || s.key != "k-123" || s.own != "mine" {
		t.Fatalf("server saw %+v", s)
	}
	// The caller's request is not modified (RoundTrippers must not mutate it).
	if req.Header.Get("Authorization") != "Bearer overridden" || req.Header.Get("X-Api-Key") != "" {
		t.Fatalf("request mutated: %v", req.Header)
	}

	// Without headers the transport passes requests through as they are.
	cfg.Transport.Headers = nil
	l, err = Prepare(context.Background(), cfg, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	resp, err = l.Transport.(*HTTPTransport).HTTPClient.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if s := <-got; s.auth != "" || s.key != "" {
		t.Fatalf("headers without config: %+v", s)
	}
}

func TestPackageMissing(t *testing.T) {
	for msg, want := range map[string]bool{
		"npm error code E404\nnpm error 404 Not Found - GET https://registry.npmjs.org/@x%2fnope":               true,
		"npm ERR! 404 '@x/nope@*' is not in this registry.":                                                     true,
		"Unable to find image 'x:latest' locally\ndocker: Error response from daemon: pull access denied for x": true,
		"docker: Error response from daemon: manifest unknown":                                                  true,
		"Error: listen EADDRINUSE": false,
		"":                         false,
	} {
		p := &Process{cmd: exec.Command("true"), stderr: newTail(1024, nil)}
		_, _ = p.stderr.Write([]byte(msg))
		if got := p.PackageMissing(); got != want {
			t.Errorf("PackageMissing(%q) = %v", msg, got)
		}
		if p.StderrTail() != msg {
			t.Errorf("StderrTail = %q", p.StderrTail())
		}
	}
}

func TestInstallUnreachable(t *testing.T) {
	for msg, want := range map[string]bool{
		// npm 10 (recorded from npx with its registry a closed port, then a name that does not resolve).
		"npm error code ECONNREFUSED\nnpm error syscall connect\nnpm error FetchError: request to http://127.0.0.1:9/x failed":                                                           true,
		"npm error code ENOTFOUND\nnpm error network request to http://no-such-host.invalid/x failed, reason: getaddrinfo ENOTFOUND":                                                     true,
		"npm ERR! code EAI_AGAIN\nnpm ERR! errno EAI_AGAIN":                                                                                                                              true,
		"npm ERR! network request to https://registry.npmjs.org/x failed, reason: socket hang up":                                                                                        true,
		"Unable to find image 'mcp/x:latest' locally\ndocker: Error response from daemon: Get \"https://registry-1.docker.io/v2/\": dial tcp: lookup registry-1.docker.io: no such host": true,
		// The server itself failing to reach its API installed fine.
		"Error: getaddrinfo ENOTFOUND api.example.com\n    at GetAddrInfoReqWrap.onlookup":        false,
		"npm error code E404\nnpm error 404 Not Found - GET https://registry.npmjs.org/@x%2fnope": false,
		"npm error code ENOENT": false,
		"":                      false,
	} {
		p := &Process{cmd: exec.Command("true"), stderr: newTail(1024, nil)}
		_, _ = p.stderr.Write([]byte(msg))
		if got := p.InstallUnreachable(); got != want {
			t.Errorf("InstallUnreachable(%q) = %v", msg, got)
		}
	}
}
