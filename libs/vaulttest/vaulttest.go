// Package vaulttest runs a real HashiCorp Vault (tools/vaultdev: an in-process Vault core with
// in-memory storage and KV v2 at secret/) as a child process of a test.
//
// tools/vaultdev is its own module outside go.work, so that the vault module's dependencies stay
// out of the services; Binary builds it once per machine and source version, and Start runs it.
// The package only uses the standard library, so importing it costs the libs module nothing.
package vaulttest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/internal/toolbuild"
)

// Time limits. A cold build of vaultdev compiles the whole vault module (minutes on a small
// machine); starting the server takes a second or two.
const (
	BuildTimeout = 15 * time.Minute
	StartTimeout = 60 * time.Second
	StopTimeout  = 15 * time.Second
)

// srcDir is tools/vaultdev relative to the repository root (the directory holding go.work).
const srcDir = "tools/vaultdev"

var spec = toolbuild.Spec{Name: "vaultdev", Dir: srcDir}

// Binary returns the path of a vaultdev binary built from the repository's tools/vaultdev, building
// it if needed into $XDG_CACHE_HOME (or ~/.cache) /mcpbus/vaultdev/<hash>/vaultdev. The hash covers
// the module's go.mod, go.sum and .go files and the Go toolchain, so a machine builds each version
// once. Concurrent callers, in this process or others, are safe: one builds while the others wait
// for its lock, and the binary appears by an atomic rename. The wait and the build take at most
// BuildTimeout.
func Binary(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, BuildTimeout)
	defer cancel()
	return toolbuild.Binary(ctx, spec)
}

// Server is a running vaultdev child process.
type Server struct {
	// Addr is the base URL, e.g. http://127.0.0.1:40123 (what VAULT_ADDR would hold).
	Addr string
	// Token is the root token.
	Token string

	proc *toolbuild.Proc
}

// Start builds (or reuses) vaultdev, runs it on a free loopback port and returns once it has
// printed its address and root token. The server stops when the test ends (and dies with the test
// process on Linux). Any failure, including a failed build, fails the test with the details.
func Start(t testing.TB) *Server {
	t.Helper()
	return toolbuild.StartForTest(t, "vaulttest", spec, BuildTimeout, start)
}

func start(bin string) (*Server, error) {
	// An os.Pipe rather than cmd.StdoutPipe: Wait never touches it, so toolbuild's reaper
	// goroutine can Wait while the reader below is still draining output.
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("stdout pipe: %w", err)
	}
	cmd := exec.Command(bin, "-addr", "127.0.0.1:0")
	cmd.Stdout = pw
	proc, err := toolbuild.Start(cmd) // stderr goes to proc.Stderr
	_ = pw.Close()                    // the child holds its own copy
	if err != nil {
		_ = pr.Close()
		return nil, err
	}
	s := &Server{proc: proc}

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
	case <-proc.Done():
		return nil, fmt.Errorf("vaultdev exited before it was ready (%v); stderr:\n%s", proc.Err(), proc.Stderr)
	case <-timer.C:
		s.Kill()
		return nil, fmt.Errorf("vaultdev printed no VAULT_ADDR and VAULT_TOKEN within %s; stderr:\n%s", StartTimeout, proc.Stderr)
	}
}

// Stop shuts the server down with SIGTERM, and kills it if it has not exited within StopTimeout.
// It is safe to call more than once and after Kill.
func (s *Server) Stop() { s.proc.Stop(StopTimeout) }

// Kill ends the server at once with SIGKILL, as a crash would; clients see connection errors.
func (s *Server) Kill() { s.proc.Kill() }
