// Package vaulttest runs a real HashiCorp Vault (tools/vaultdev: an in-process Vault core with
// in-memory storage and KV v2 at secret/) as a child process of a test.
//
// tools/vaultdev is its own module outside go.work, so that the vault module's dependencies stay
// out of the services; Binary builds it once per machine and source version, and Start runs it.
// The package only uses the standard library, so importing it costs the libs module nothing.
package vaulttest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Time limits. A cold build of vaultdev compiles the whole vault module (minutes on a small
// machine); starting the server takes a second or two.
const (
	BuildTimeout = 15 * time.Minute
	StartTimeout = 60 * time.Second
	StopTimeout  = 15 * time.Second
	killTimeout  = 10 * time.Second
)

// srcDir is tools/vaultdev relative to the repository root (the directory holding go.work).
const srcDir = "tools/vaultdev"

// Binary returns the path of a vaultdev binary built from the repository's tools/vaultdev, building
// it if needed into $XDG_CACHE_HOME (or ~/.cache) /mcpbus/vaultdev/<hash>/vaultdev. The hash covers
// the module's go.mod, go.sum and .go files and the Go toolchain, so a machine builds each version
// once. Concurrent callers, in this process or others, are safe: one builds while the others wait
// for its lock, and the binary appears by an atomic rename.
func Binary(ctx context.Context) (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	src := filepath.Join(root, srcDir)
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("vaulttest: the go command is needed to build %s: %w", srcDir, err)
	}
	toolchain, err := goToolchain(ctx, goBin, src)
	if err != nil {
		return "", err
	}
	hash, err := sourceHash(src, toolchain)
	if err != nil {
		return "", err
	}
	cache, err := cacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "mcpbus", "vaultdev", hash)
	bin := filepath.Join(dir, "vaultdev")
	if isExecutable(bin) {
		// Mark it used, so that pruneStale (run by builds of other sources) keeps it.
		now := time.Now()
		_ = os.Chtimes(dir, now, now)
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("vaulttest: create cache dir: %w", err)
	}

	ctx, cancel := context.WithTimeout(ctx, BuildTimeout)
	defer cancel()
	unlock, err := lockFile(ctx, filepath.Join(dir, "build.lock"))
	if err != nil {
		return "", fmt.Errorf("vaulttest: wait for another build of vaultdev: %w", err)
	}
	defer unlock()
	if isExecutable(bin) { // built by whoever held the lock before us
		return bin, nil
	}

	tmp, err := os.CreateTemp(dir, "vaultdev-*.tmp")
	if err != nil {
		return "", fmt.Errorf("vaulttest: create temp file: %w", err)
	}
	tmpName := tmp.Name()
	_ = tmp.Close()
	defer os.Remove(tmpName) // no-op once renamed

	cmd := exec.CommandContext(ctx, goBin, "build", "-o", tmpName, ".")
	cmd.Dir = src
	// The module is outside the workspace on purpose: its dependencies must not reach go.work.
	cmd.Env = append(os.Environ(), "GOWORK=off")
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", err, ctx.Err())
		}
		return "", fmt.Errorf("vaulttest: GOWORK=off go build in %s after %s: %w\n%s",
			src, time.Since(start).Round(time.Second), err, out)
	}
	if err := os.Rename(tmpName, bin); err != nil {
		return "", fmt.Errorf("vaulttest: install vaultdev binary: %w", err)
	}
	pruneStale(filepath.Dir(dir), dir)
	return bin, nil
}

// staleAfter is how long a build of other sources (another branch, an older commit) stays in the
// cache; each is a binary of about 150 MB.
const staleAfter = 14 * 24 * time.Hour

// pruneStale removes the builds in parent, other than keep, not used for staleAfter. Best
// effort: a build in use by a running test survives on Linux (its file is only unlinked).
func pruneStale(parent, keep string) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		dir := filepath.Join(parent, e.Name())
		if !e.IsDir() || dir == keep {
			continue
		}
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > staleAfter {
			_ = os.RemoveAll(dir)
		}
	}
}

// repoRoot walks up from the working directory to the directory holding go.work.
func repoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("vaulttest: working directory: %w", err)
	}
	for dir := wd; ; {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("vaulttest: no go.work in %s or any parent directory", wd)
		}
		dir = parent
	}
}

// cacheDir is $XDG_CACHE_HOME, or ~/.cache when it is unset (or relative, which the XDG spec
// says to ignore).
func cacheDir() (string, error) {
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" && filepath.IsAbs(d) {
		return d, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("vaulttest: no cache dir: XDG_CACHE_HOME unset and %w", err)
	}
	return filepath.Join(home, ".cache"), nil
}

// goToolchain names the toolchain and target, which change the binary as much as the sources do.
func goToolchain(ctx context.Context, goBin, src string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "env", "GOVERSION", "GOOS", "GOARCH", "CGO_ENABLED")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("vaulttest: go env: %w", err)
	}
	return strings.Join(strings.Fields(string(out)), " "), nil
}

// sourceHash hashes go.mod, go.sum and every non-test .go file under src (names and contents, in
// a fixed order) together with the toolchain string.
func sourceHash(src, toolchain string) (string, error) {
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
			(strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go")) {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("vaulttest: read %s: %w", src, err)
	}
	if !slices.Contains(files, "go.mod") {
		return "", fmt.Errorf("vaulttest: %s has no go.mod", src)
	}
	slices.Sort(files)
	h := sha256.New()
	fmt.Fprintf(h, "toolchain %s\n", toolchain)
	for _, rel := range files {
		data, err := os.ReadFile(filepath.Join(src, rel))
		if err != nil {
			return "", fmt.Errorf("vaulttest: read %s: %w", rel, err)
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

// Server is a running vaultdev child process.
type Server struct {
	// Addr is the base URL, e.g. http://127.0.0.1:40123 (what VAULT_ADDR would hold).
	Addr string
	// Token is the root token.
	Token string

	cmd     *exec.Cmd
	done    chan struct{} // closed once the process has exited and been reaped
	waitErr error         // set before done is closed
	stderr  *tailBuffer
	once    sync.Once
}

// Start builds (or reuses) vaultdev, runs it on a free loopback port and returns once it has
// printed its address and root token. The server stops when the test ends (and dies with the test
// process on Linux). Any failure, including a failed build, fails the test with the details.
func Start(t testing.TB) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), BuildTimeout)
	bin, err := Binary(ctx)
	cancel()
	if err != nil {
		t.Fatalf("vaulttest: cannot build vaultdev: %v", err)
	}
	s, err := start(bin)
	if err != nil {
		t.Fatalf("vaulttest: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

func start(bin string) (*Server, error) {
	// An os.Pipe rather than cmd.StdoutPipe: Wait never touches it, so the reaper goroutine
	// below can Wait while the reader is still draining output.
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("stdout pipe: %w", err)
	}
	s := &Server{done: make(chan struct{}), stderr: &tailBuffer{max: 64 << 10}}
	s.cmd = exec.Command(bin, "-addr", "127.0.0.1:0")
	s.cmd.Stdout = pw
	s.cmd.Stderr = s.stderr
	s.cmd.SysProcAttr = sysProcAttr()
	err = s.cmd.Start()
	_ = pw.Close() // the child holds its own copy
	if err != nil {
		_ = pr.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		s.waitErr = s.cmd.Wait()
		close(s.done)
	}()

	type creds struct{ addr, token string }
	got := make(chan creds, 1)
	go func() {
		defer pr.Close()
		var c creds
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			k, v, _ := strings.Cut(sc.Text(), "=")
			switch k {
			case "VAULT_ADDR":
				c.addr = v
			case "VAULT_TOKEN":
				c.token = v
			}
			if c.addr != "" && c.token != "" {
				got <- c
				break
			}
		}
		// Keep draining so the child never blocks on a full pipe.
		_, _ = io.Copy(io.Discard, pr)
	}()

	timer := time.NewTimer(StartTimeout)
	defer timer.Stop()
	select {
	case c := <-got:
		if !strings.HasPrefix(c.addr, "http://") {
			s.Kill()
			return nil, fmt.Errorf("vaultdev printed VAULT_ADDR=%q, want an http:// URL", c.addr)
		}
		s.Addr, s.Token = c.addr, c.token
		return s, nil
	case <-s.done:
		return nil, fmt.Errorf("vaultdev exited before it was ready (%v); stderr:\n%s", s.waitErr, s.stderr)
	case <-timer.C:
		s.Kill()
		return nil, fmt.Errorf("vaultdev printed no VAULT_ADDR and VAULT_TOKEN within %s; stderr:\n%s", StartTimeout, s.stderr)
	}
}

// Stop shuts the server down with SIGTERM, and kills it if it has not exited within StopTimeout.
// It is safe to call more than once and after Kill.
func (s *Server) Stop() {
	s.once.Do(func() {
		if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			_ = s.cmd.Process.Kill() // no SIGTERM on this platform
		}
		timer := time.NewTimer(StopTimeout)
		defer timer.Stop()
		select {
		case <-s.done:
		case <-timer.C:
			_ = s.cmd.Process.Kill()
			s.waitDone()
		}
	})
}

// Kill ends the server at once with SIGKILL, as a crash would; clients see connection errors.
func (s *Server) Kill() {
	s.once.Do(func() {
		_ = s.cmd.Process.Kill()
		s.waitDone()
	})
}

func (s *Server) waitDone() {
	timer := time.NewTimer(killTimeout)
	defer timer.Stop()
	select {
	case <-s.done:
	case <-timer.C: // a killed process is reaped at once; give up rather than hang the test
	}
}

// tailBuffer keeps the last max bytes written to it: enough of the child's stderr to explain a
// failure without holding an unbounded log.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = b.buf[over:]
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(bytes.TrimSpace(b.buf))
}
