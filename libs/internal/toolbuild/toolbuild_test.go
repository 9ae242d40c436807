package toolbuild

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// writeFile writes content to dir/name, creating parent directories.
func writeFile(t *testing.T, dir, name, content string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestBinaryBuildsOnceAndRebuildsOnChange(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go build")
	}
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	src := t.TempDir()
	writeFile(t, src, "go.mod", "module example.com/hello\n\ngo 1.26\n")
	writeFile(t, src, "main.go", "package main\n\nfunc main() { println(\"one\") }\n")
	spec := Spec{Name: "hellodev", Binary: "hello", Dir: src}

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	// Concurrent first callers: one builds, the others wait for it and get the same file.
	var wg sync.WaitGroup
	paths := make([]string, 3)
	errs := make([]error, 3)
	for i := range paths {
		wg.Go(func() { paths[i], errs[i] = Binary(ctx, spec) })
	}
	wg.Wait()
	for i := range paths {
		if errs[i] != nil || paths[i] != paths[0] {
			t.Fatalf("call %d: %q, %v; want %q", i, paths[i], errs[i], paths[0])
		}
	}
	first := paths[0]
	if dir := filepath.Dir(filepath.Dir(first)); dir != filepath.Join(cache, "mcpbus", "hellodev") || filepath.Base(first) != "hello" {
		t.Fatalf("binary at %s, want %s/mcpbus/hellodev/<hash>/hello", first, cache)
	}
	run := func(bin string) string {
		t.Helper()
		out, err := exec.Command(bin).CombinedOutput()
		if err != nil {
			t.Fatalf("run %s: %v\n%s", bin, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := run(first); got != "one" {
		t.Fatalf("binary printed %q, want one", got)
	}
	leftovers, err := filepath.Glob(filepath.Join(filepath.Dir(first), "*.tmp"))
	if err != nil || len(leftovers) > 0 {
		t.Fatalf("temp files left in the cache dir: %v %v", leftovers, err)
	}

	// Changed sources are a new build in a directory of their own; the old one stays.
	writeFile(t, src, "main.go", "package main\n\nfunc main() { println(\"two\") }\n")
	second, err := Binary(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if second == first || run(second) != "two" || run(first) != "one" {
		t.Fatalf("after an edit: %s (prints %q), before: %s", second, run(second), first)
	}

	// A build failure names the command and shows the compiler's message.
	writeFile(t, src, "main.go", "package main\n\nfunc main() { undefinedThing() }\n")
	if _, err := Binary(ctx, spec); err == nil || !strings.Contains(err.Error(), "undefinedThing") {
		t.Fatalf("broken source: %v, want the compiler error", err)
	}
}

func TestSourceHashTracksTheBuildInputs(t *testing.T) {
	dir := t.TempDir()
	hash := func(toolchain string) string {
		t.Helper()
		h, err := SourceHash(dir, toolchain)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}

	if _, err := SourceHash(dir, "go1"); err == nil {
		t.Fatal("a dir without go.mod hashed without error")
	}
	writeFile(t, dir, "go.mod", "module x\n")
	writeFile(t, dir, "main.go", "package main\nfunc main() {}\n")
	base := hash("go1")
	if len(base) != 32 || hash("go1") != base {
		t.Fatalf("hash %q is not a stable 32-hex-digit string", base)
	}

	// Files that do not change the binary leave the hash alone.
	writeFile(t, dir, "README.md", "docs")
	writeFile(t, dir, "config.yaml", "a: b\n")
	writeFile(t, dir, "main_test.go", "package main\n")
	writeFile(t, dir, "testdata/x.go", "package x\n")
	if h := hash("go1"); h != base {
		t.Fatal("README, config.yaml, a _test.go file or testdata changed the hash")
	}

	// Build inputs change it.
	steps := []struct {
		what string
		do   func()
	}{
		{"main.go edited", func() { writeFile(t, dir, "main.go", "package main\nfunc main() { println() }\n") }},
		{"go.sum added", func() { writeFile(t, dir, "go.sum", "example.com/m v1.0.0 h1:x\n") }},
		{"go.mod edited", func() { writeFile(t, dir, "go.mod", "module x\n\ngo 1.26\n") }},
		{"a subpackage file added", func() { writeFile(t, dir, "internal/a/a.go", "package a\n") }},
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

func TestHashKeyNamesOnlyAnotherPackage(t *testing.T) {
	// The module's own package hashes as the toolchain alone, as before Spec.Package existed, so
	// that its cached binaries stay valid.
	if got := hashKey("go1 linux amd64 1", "."); got != "go1 linux amd64 1" {
		t.Fatalf(`hashKey(toolchain, ".") = %q, want the toolchain alone`, got)
	}
	keys := map[string]string{}
	for _, pkg := range []string{".", "example.com/a/cmd/a", "example.com/a/cmd/b"} {
		k := hashKey("go1", pkg)
		if prev, dup := keys[k]; dup {
			t.Fatalf("packages %q and %q share the hash key %q", prev, pkg, k)
		}
		keys[k] = pkg
	}
}

func TestRepoRootHoldsGoWork(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.work")); err != nil {
		t.Fatal(err)
	}
}

func TestCacheDirFollowsXDG(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", "/some/cache")
	if d, err := CacheDir(); err != nil || d != "/some/cache" {
		t.Fatalf("CacheDir() = %q, %v; want /some/cache", d, err)
	}
	t.Setenv("XDG_CACHE_HOME", "relative/ignored")
	home, err := os.UserHomeDir()
	if err != nil {
		t.Skip("no home directory")
	}
	if d, err := CacheDir(); err != nil || d != filepath.Join(home, ".cache") {
		t.Fatalf("CacheDir() = %q, %v; want %s", d, err, filepath.Join(home, ".cache"))
	}
}

func TestTailBufferKeepsTheEnd(t *testing.T) {
	b := &TailBuffer{Max: 8}
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
	old := time.Now().Add(-StaleAfter - time.Hour)
	mk := func(name string, mtime time.Time) string {
		t.Helper()
		dir := filepath.Join(parent, name)
		writeFile(t, dir, "tool", "x")
		if err := os.Chtimes(dir, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	stale := mk("stale", old)
	keep := mk("keep", old)
	recent := mk("recent", time.Now().Add(-time.Hour))

	PruneStale(parent, keep)
	for dir, want := range map[string]bool{stale: false, keep: true, recent: true} {
		_, err := os.Stat(dir)
		if got := err == nil; got != want {
			t.Errorf("%s exists = %v, want %v", filepath.Base(dir), got, want)
		}
	}
}

func TestProcStopAndKill(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep command")
	}
	for _, tc := range []struct {
		name    string
		end     func(*Proc)
		wantErr bool
	}{
		{"stop", func(p *Proc) { p.Stop(5 * time.Second) }, true}, // sleep dies of SIGTERM
		{"kill", (*Proc).Kill, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Start(exec.Command(sleep, "60"))
			if err != nil {
				t.Fatal(err)
			}
			if p.Pid() <= 0 {
				t.Fatalf("pid %d", p.Pid())
			}
			begin := time.Now()
			tc.end(p)
			if d := time.Since(begin); d > 5*time.Second {
				t.Fatalf("%s took %s", tc.name, d)
			}
			select {
			case <-p.Done():
			default:
				t.Fatal("still running")
			}
			if err := p.Err(); (err != nil) != tc.wantErr {
				t.Fatalf("Err() = %v", err)
			}
			tc.end(p) // idempotent
			p.Stop(time.Second)
		})
	}
}
