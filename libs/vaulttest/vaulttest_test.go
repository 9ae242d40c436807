package vaulttest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var client = &http.Client{Timeout: 10 * time.Second}

// vaultDo sends a JSON request to the server and decodes a JSON reply into out (if non-nil).
func vaultDo(t *testing.T, s *Server, method, path, token string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, s.Addr+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("X-Vault-Token", token)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: decode %q: %v", method, path, data, err)
		}
	}
	return resp.StatusCode
}

func TestStartServesHealthKVv2AndApprole(t *testing.T) {
	s := Start(t)
	if !strings.HasPrefix(s.Addr, "http://127.0.0.1:") || strings.HasSuffix(s.Addr, ":0") {
		t.Fatalf("Addr = %q, want http://127.0.0.1:<free port>", s.Addr)
	}
	if s.Token == "" {
		t.Fatal("empty root token")
	}

	var health struct {
		Initialized bool `json:"initialized"`
		Sealed      bool `json:"sealed"`
		Version     string
	}
	if code := vaultDo(t, s, "GET", "/v1/sys/health", "", nil, &health); code != http.StatusOK {
		t.Fatalf("health status %d, want 200", code)
	}
	if !health.Initialized || health.Sealed {
		t.Fatalf("health = %+v, want initialized and unsealed", health)
	}

	// KV v2 at secret/: writes go to data/, each write is a new version.
	const path = "/v1/secret/data/vaulttest/demo"
	var wrote struct {
		Data struct {
			Version int `json:"version"`
		} `json:"data"`
	}
	for i, v := range []string{"first-value", "second-value"} {
		code := vaultDo(t, s, "POST", path, s.Token, map[string]any{"data": map[string]string{"api_key": v}}, &wrote)
		if code != http.StatusOK {
			t.Fatalf("write %d: status %d", i+1, code)
		}
		if wrote.Data.Version != i+1 {
			t.Fatalf("write %d: version %d, want %d", i+1, wrote.Data.Version, i+1)
		}
	}
	var read struct {
		Data struct {
			Data     map[string]string `json:"data"`
			Metadata struct {
				Version int `json:"version"`
			} `json:"metadata"`
		} `json:"data"`
	}
	if code := vaultDo(t, s, "GET", path, s.Token, nil, &read); code != http.StatusOK {
		t.Fatalf("read: status %d", code)
	}
	if read.Data.Data["api_key"] != "second-value" || read.Data.Metadata.Version != 2 {
		t.Fatalf("read = %+v, want api_key=second-value at version 2", read.Data)
	}
	if code := vaultDo(t, s, "GET", path+"?version=1", s.Token, nil, &read); code != http.StatusOK || read.Data.Data["api_key"] != "first-value" {
		t.Fatalf("read version 1: status %d, data %+v", code, read.Data)
	}

	// The token is really checked.
	if code := vaultDo(t, s, "GET", path, "", nil, nil); code != http.StatusForbidden {
		t.Fatalf("read without token: status %d, want 403", code)
	}
	if code := vaultDo(t, s, "GET", path, "hvs.not-a-token", nil, nil); code != http.StatusForbidden {
		t.Fatalf("read with a wrong token: status %d, want 403", code)
	}

	// AppRole is not enabled up front, and enabling it works (the credential tests need it).
	var auths map[string]any
	if code := vaultDo(t, s, "GET", "/v1/sys/auth", s.Token, nil, &auths); code != http.StatusOK {
		t.Fatalf("list auth methods: status %d", code)
	}
	if _, ok := auths["approle/"]; ok {
		t.Fatal("approle/ is already enabled")
	}
	if code := vaultDo(t, s, "POST", "/v1/sys/auth/approle", s.Token, map[string]string{"type": "approle"}, nil); code != http.StatusNoContent {
		t.Fatalf("enable approle: status %d, want 204", code)
	}
	if code := vaultDo(t, s, "POST", "/v1/auth/approle/role/svc", s.Token, map[string]any{"token_policies": []string{"default"}}, nil); code != http.StatusNoContent {
		t.Fatalf("create approle role: status %d, want 204", code)
	}
	var roleID struct {
		Data struct {
			RoleID string `json:"role_id"`
		} `json:"data"`
	}
	if code := vaultDo(t, s, "GET", "/v1/auth/approle/role/svc/role-id", s.Token, nil, &roleID); code != http.StatusOK || roleID.Data.RoleID == "" {
		t.Fatalf("read role id: status %d, %+v", code, roleID)
	}
}

func TestStopAndKillEndTheServer(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(*Server)
	}{
		{"stop", (*Server).Stop},
		{"kill", (*Server).Kill},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Start(t)
			if code := vaultDo(t, s, "GET", "/v1/sys/health", "", nil, nil); code != http.StatusOK {
				t.Fatalf("health before %s: status %d", tc.name, code)
			}
			begin := time.Now()
			tc.end(s)
			if d := time.Since(begin); d > StopTimeout {
				t.Fatalf("%s took %s: the server did not exit by itself", tc.name, d)
			}
			select {
			case <-s.done:
			default:
				t.Fatalf("process still running after %s", tc.name)
			}
			if tc.name == "stop" && s.waitErr != nil {
				t.Fatalf("SIGTERM should be a clean exit, got %v; stderr:\n%s", s.waitErr, s.stderr)
			}
			if resp, err := client.Get(s.Addr + "/v1/sys/health"); err == nil {
				resp.Body.Close()
				t.Fatalf("health after %s answered %d, want a connection error", tc.name, resp.StatusCode)
			}
			tc.end(s) // idempotent
			s.Stop()
		})
	}
}

func TestBinaryIsBuiltOnceAndShared(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), BuildTimeout)
	defer cancel()
	first, err := Binary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(first)
	if err != nil {
		t.Fatal(err)
	}
	cache, err := cacheDir()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(cache, "mcpbus", "vaultdev"); filepath.Dir(filepath.Dir(first)) != want {
		t.Fatalf("binary at %s, want under %s/<hash>/", first, want)
	}

	// Concurrent callers get the same, untouched file.
	var wg sync.WaitGroup
	paths := make([]string, 4)
	errs := make([]error, 4)
	for i := range paths {
		wg.Go(func() { paths[i], errs[i] = Binary(ctx) })
	}
	wg.Wait()
	for i := range paths {
		if errs[i] != nil || paths[i] != first {
			t.Fatalf("call %d: %q, %v; want %q", i, paths[i], errs[i], first)
		}
	}
	again, err := os.Stat(first)
	if err != nil {
		t.Fatal(err)
	}
	if !again.ModTime().Equal(fi.ModTime()) || !os.SameFile(fi, again) {
		t.Fatal("the cached binary was rebuilt although its sources did not change")
	}
	leftovers, err := filepath.Glob(filepath.Join(filepath.Dir(first), "*.tmp"))
	if err != nil || len(leftovers) > 0 {
		t.Fatalf("temp files left in the cache dir: %v %v", leftovers, err)
	}
}

func TestSourceHashTracksTheBuildInputs(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hash := func(toolchain string) string {
		t.Helper()
		h, err := sourceHash(dir, toolchain)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}

	if _, err := sourceHash(dir, "go1"); err == nil {
		t.Fatal("a dir without go.mod hashed without error")
	}
	write("go.mod", "module x\n")
	write("main.go", "package main\nfunc main() {}\n")
	base := hash("go1")
	if len(base) != 32 || hash("go1") != base {
		t.Fatalf("hash %q is not a stable 32-hex-digit string", base)
	}

	// Files that do not change the binary leave the hash alone.
	write("README.md", "docs")
	write("main_test.go", "package main\n")
	write("testdata/x.go", "package x\n")
	if h := hash("go1"); h != base {
		t.Fatal("README, a _test.go file or testdata changed the hash")
	}

	// Build inputs change it.
	steps := []struct {
		what string
		do   func()
	}{
		{"main.go edited", func() { write("main.go", "package main\nfunc main() { println() }\n") }},
		{"go.sum added", func() { write("go.sum", "example.com/m v1.0.0 h1:x\n") }},
		{"go.mod edited", func() { write("go.mod", "module x\n\ngo 1.26\n") }},
		{"a subpackage file added", func() { write("internal/a/a.go", "package a\n") }},
	}
	seen := map[string]string{base: "initial"}
	for _, st := range steps {
		st.do()
		h := hash("go1")
		if prev, dup := seen[h]; dup {
			t.Fatalf("%s: hash equals the one after %s", st.what, prev)
		}
		seen[h] = st.what
	}
	if hash("go1") == hash("go2") {
		t.Fatal("the toolchain does not change the hash")
	}
}

func TestRepoRootHoldsGoWorkAndVaultdev(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"go.work", filepath.Join(srcDir, "go.mod")} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Fatalf("repo root %s: %v", root, err)
		}
	}
}

func TestTailBufferKeepsTheEnd(t *testing.T) {
	b := &tailBuffer{max: 8}
	for _, s := range []string{"abc", "defgh", "ijk"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if got := b.String(); got != "defghijk" {
		t.Fatalf("tail = %q, want %q", got, "defghijk")
	}
}

func TestPruneStaleRemovesOnlyOldOtherBuilds(t *testing.T) {
	parent := t.TempDir()
	old := time.Now().Add(-staleAfter - time.Hour)
	mk := func(name string, mtime time.Time) string {
		t.Helper()
		dir := filepath.Join(parent, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "vaultdev"), []byte("x"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(dir, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	stale := mk("stale", old)
	keep := mk("keep", old)
	recent := mk("recent", time.Now().Add(-time.Hour))

	pruneStale(parent, keep)
	for dir, want := range map[string]bool{stale: false, keep: true, recent: true} {
		_, err := os.Stat(dir)
		if got := err == nil; got != want {
			t.Errorf("%s exists = %v, want %v", filepath.Base(dir), got, want)
		}
	}
}
