// Package toolbuild builds the repository's tool modules and runs them as child processes of
// tests.
//
// A tool module (tools/vaultdev, tools/jaegerdev) is its own Go module outside go.work, so that
// its heavy dependencies never reach the services. Binary builds one of its packages once per
// machine and source version into the user's cache directory; Start runs the result so that it
// dies with the test process. It only uses the standard library.
package toolbuild

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Spec names a binary to build from a tool module.
type Spec struct {
	// Name is the cached binary's file name and the cache directory under mcpbus/, e.g. "vaultdev".
	// The binary is at <cache>/mcpbus/<Name>/<hash>/<Binary or Name>.
	Name string
	// Binary is the cached binary's file name when it differs from Name, e.g. "jaeger".
	Binary string
	// Dir is the module's directory relative to the repository root, e.g. "tools/vaultdev" (or
	// an absolute path).
	Dir string
	// Package is what `go build` builds inside Dir: "." (the default) or the import path of a
	// main package the module requires, e.g. "github.com/jaegertracing/jaeger/cmd/jaeger".
	Package string
	// Test builds the package's test binary (`go test -c`) instead of a command: a test suite
	// with heavy dependencies, compiled once per machine and run as a program.
	Test bool
}

func (s Spec) binaryName() string {
	if s.Binary != "" {
		return s.Binary
	}
	return s.Name
}

// Binary returns the path of the binary built from spec, building it if needed into
// $XDG_CACHE_HOME (or ~/.cache) /mcpbus/<Name>/<hash>/. The hash covers the module's go.mod,
// go.sum and .go files and the Go toolchain, so a machine builds each version once. Concurrent
// callers, in this process or others, are safe: one builds while the others wait for its lock, and
// the binary appears by an atomic rename. ctx bounds the wait for the lock and the build.
func Binary(ctx context.Context, spec Spec) (string, error) {
	if spec.Name == "" || spec.Dir == "" {
		return "", fmt.Errorf("toolbuild: Spec needs a Name and a Dir: %+v", spec)
	}
	pkg := spec.Package
	if pkg == "" {
		pkg = "."
	}
	src := spec.Dir
	if !filepath.IsAbs(src) {
		root, err := RepoRoot()
		if err != nil {
			return "", err
		}
		src = filepath.Join(root, src)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("toolbuild: the go command is needed to build %s: %w", spec.Dir, err)
	}
	toolchain, err := goToolchain(ctx, goBin, src)
	if err != nil {
		return "", err
	}
	key := hashKey(toolchain, pkg)
	if spec.Test {
		key += " test"
	}
	hash, err := sourceHash(src, key, spec.Test)
	if err != nil {
		return "", err
	}
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "mcpbus", spec.Name, hash)
	bin := filepath.Join(dir, spec.binaryName())
	if isExecutable(bin) {
		// Mark it used, so that PruneStale (run by builds of other sources) keeps it.
		now := time.Now()
		_ = os.Chtimes(dir, now, now)
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("toolbuild: create cache dir: %w", err)
	}

	unlock, err := lockFile(ctx, filepath.Join(dir, "build.lock"))
	if err != nil {
		return "", fmt.Errorf("toolbuild: wait for another build of %s: %w", spec.Name, err)
	}
	defer unlock()
	if isExecutable(bin) { // built by whoever held the lock before us
		return bin, nil
	}

	tmp, err := os.CreateTemp(dir, spec.binaryName()+"-*.tmp")
	if err != nil {
		return "", fmt.Errorf("toolbuild: create temp file: %w", err)
	}
	tmpName := tmp.Name()
	_ = tmp.Close()
	defer os.Remove(tmpName) // no-op once renamed

	args := []string{"build", "-o", tmpName, pkg}
	if spec.Test {
		args = []string{"test", "-c", "-o", tmpName, pkg}
	}
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir = src
	// The module is outside the workspace on purpose: its dependencies must not reach go.work.
	// No experiment (make sets GOEXPERIMENT=simd for the scanner): these wrappers use none, and
	// a build with one would not share a compile cache with one without it (Vault: ~30 min).
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOEXPERIMENT=")
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", err, ctx.Err())
		}
		return "", fmt.Errorf("toolbuild: GOWORK=off go %s %s in %s after %s: %w\n%s",
			args[0], pkg, src, time.Since(start).Round(time.Second), err, out)
	}
	if err := os.Rename(tmpName, bin); err != nil {
		return "", fmt.Errorf("toolbuild: install %s binary: %w", spec.Name, err)
	}
	PruneStale(filepath.Dir(dir), dir)
	return bin, nil
}

// StaleAfter is how long a build of other sources (another branch, an older commit) stays in the
// cache; each is a binary of 100 MB or more.
const StaleAfter = 14 * 24 * time.Hour

// PruneStale removes the builds in parent, other than keep, not used for StaleAfter. Best
// effort: a build in use by a running test survives on Linux (its file is only unlinked).
func PruneStale(parent, keep string) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		dir := filepath.Join(parent, e.Name())
		if !e.IsDir() || dir == keep {
			continue
		}
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > StaleAfter {
			_ = os.RemoveAll(dir)
		}
	}
}

// RepoRoot walks up from the working directory to the directory holding go.work.
func RepoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("toolbuild: working directory: %w", err)
	}
	for dir := wd; ; {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("toolbuild: no go.work in %s or any parent directory", wd)
		}
		dir = parent
	}
}

// CacheDir is $XDG_CACHE_HOME, or ~/.cache when it is unset (or relative, which the XDG spec
// says to ignore).
func CacheDir() (string, error) {
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" && filepath.IsAbs(d) {
		return d, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("toolbuild: no cache dir: XDG_CACHE_HOME unset and %w", err)
	}
	return filepath.Join(home, ".cache"), nil
}

// goToolchain names the toolchain and target, which change the binary as much as the sources do.
func goToolchain(ctx context.Context, goBin, src string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "env", "GOVERSION", "GOOS", "GOARCH", "CGO_ENABLED")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOEXPERIMENT=")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("toolbuild: go env in %s: %w", src, err)
	}
	return strings.Join(strings.Fields(string(out)), " "), nil
}

// hashKey is what SourceHash gets besides the sources: the toolchain, and the package built when
// it is not the module's own ("."). Leaving "." out keeps the hash, and so the cached binary, that
// a module's own package had before Spec.Package existed (tools/vaultdev's).
func hashKey(toolchain, pkg string) string {
	if pkg == "." {
		return toolchain
	}
	return toolchain + " package " + pkg
}

// SourceHash hashes go.mod, go.sum and every non-test .go file under src (names and contents, in
// a fixed order) together with the toolchain string, into 32 hex digits.
func SourceHash(src, toolchain string) (string, error) { return sourceHash(src, toolchain, false) }

// sourceHash is SourceHash, with the _test.go files too when tests is set.
func sourceHash(src, toolchain string, tests bool) (string, error) {
	var files []string
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			// The go command ignores these directories too.
			if path != src && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if rel == "go.mod" || rel == "go.sum" ||
			(strings.HasSuffix(name, ".go") && (tests || !strings.HasSuffix(name, "_test.go"))) {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("toolbuild: read %s: %w", src, err)
	}
	if !slices.Contains(files, "go.mod") {
		return "", fmt.Errorf("toolbuild: %s has no go.mod", src)
	}
	slices.Sort(files)
	h := sha256.New()
	fmt.Fprintf(h, "toolchain %s\n", toolchain)
	for _, rel := range files {
		data, err := os.ReadFile(filepath.Join(src, rel))
		if err != nil {
			return "", fmt.Errorf("toolbuild: read %s: %w", rel, err)
		}
		fmt.Fprintf(h, "%s %d\n", filepath.ToSlash(rel), len(data))
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil)[:16]), nil
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}
