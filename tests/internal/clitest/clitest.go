// Package clitest runs the built mcpbus command in end-to-end tests: it
// builds tools/mcpbus, runs `mcpbus up` as a child process that ends with the
// test, and runs client commands against a bus, each with an environment
// free of the test's own MCPBUS_* settings.
package clitest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/testkit"
)

// RepoRoot is the repository's top directory (testkit.RepoRoot), failing
// the test if it cannot be found.
func RepoRoot(t testing.TB) string {
	t.Helper()
	root, err := testkit.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// Build builds tools/mcpbus (testkit.BuildCommand) into a temporary
// directory removed when the test ends, and returns the binary's path.
func Build(t testing.TB) string {
	t.Helper()
	bin, cleanup, err := testkit.BuildCommand("mcpbus", "./tools/mcpbus")()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	return bin
}

// Env is the test's environment without MCPBUS_* settings, plus extra: what
// a child sees is then only what the test sets.
func Env(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MCPBUS_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// UpOptions says how StartUp runs `mcpbus up`.
type UpOptions struct {
	// Dir is the working directory, where the default data dir (.mcpbus) is.
	Dir string
	// Env is the whole environment; nil gives Env().
	Env []string
	// Args follow `up`. Without --http-addr, 127.0.0.1:0 is added, and
	// without --nats-port (or MCPBUS_NATS_PORT in Env), --nats-port 0: up
	// binds free ports itself (a port a test picked could be taken by another
	// package before up binds it) and StartUp reads from its log where it
	// listens (NATSURL, HTTPURL).
	Args []string
	// StopGrace is how long the test's cleanup waits after SIGTERM before
	// SIGKILL, for an up still running then (up stops its servers itself on
	// SIGTERM); zero sends SIGKILL at once.
	StopGrace time.Duration
}

// Up is a running `mcpbus up`, its stdout and stderr in one log.
type Up struct {
	bin     string
	cmd     *exec.Cmd
	logs    *testkit.LogBuffer
	done    chan struct{}
	err     error // of Wait, set before done is closed
	natsURL string
	httpURL string // set when StartUp read it from the log
	dataDir string
}

// StartUp runs bin (the built mcpbus) as `mcpbus up`. It ends with the test:
// stopped by the test's cleanup if it still runs then (see
// UpOptions.StopGrace), and by the kernel should the test process die
// first. Its log is shown when the test fails. When StartUp chose the NATS
// port (UpOptions.Args), it returns once up has said where it listens,
// failing the test if up exits first or says nothing within AddrWait.
func StartUp(t testing.TB, bin string, opts UpOptions) *Up {
	t.Helper()
	args := slices.Clone(opts.Args)
	if !slices.Contains(args, "--http-addr") {
		args = append(args, "--http-addr", "127.0.0.1:0")
	}
	env := opts.Env
	if env == nil {
		env = Env()
	}
	freePorts := !slices.Contains(args, "--nats-port") && !slices.ContainsFunc(env, func(kv string) bool {
		return strings.HasPrefix(kv, "MCPBUS_NATS_PORT=")
	})
	if freePorts {
		args = append(args, "--nats-port", "0")
	}
	u := &Up{bin: bin, logs: &testkit.LogBuffer{}, done: make(chan struct{})}
	u.natsURL, u.dataDir = where(opts.Dir, env, args)
	u.cmd = exec.Command(bin, append([]string{"up"}, args...)...)
	u.cmd.Dir = opts.Dir
	u.cmd.Env = env
	u.cmd.Stdout, u.cmd.Stderr = u.logs, u.logs
	u.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := u.cmd.Start(); err != nil {
		t.Fatalf("starting mcpbus up: %v", err)
	}
	go func() {
		u.err = u.cmd.Wait()
		close(u.done)
	}()
	t.Cleanup(func() {
		if !u.Exited() {
			u.end(opts.StopGrace)
		}
		if t.Failed() {
			t.Logf("mcpbus up log (tail):\n%s", u.Tail(12000))
		}
	})
	if freePorts {
		u.waitAddrs(t, AddrWait)
	}
	return u
}

// EndBefore makes the up end (SIGTERM and up to grace, then SIGKILL) at
// this point of t's cleanups, which run last-registered first, instead of
// after every cleanup registered since StartUp: an httptest.Server the up
// holds a connection to (a stream it keeps open) waits in Close until that
// connection ends, which took ~150 s of the console test.
func (u *Up) EndBefore(t testing.TB, grace time.Duration) {
	t.Cleanup(func() {
		if !u.Exited() {
			u.end(grace)
		}
	})
}

// end stops the process: SIGTERM and up to grace for it to exit, then SIGKILL.
func (u *Up) end(grace time.Duration) {
	if grace > 0 {
		_ = u.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-u.done:
			return
		case <-time.After(grace):
		}
	}
	_ = u.cmd.Process.Kill()
	<-u.done
}

// where is the NATS URL and the data dir of an up run in dir with env and
// args: the flags win over MCPBUS_NATS_PORT and MCPBUS_DATA_DIR, and those
// over up's defaults (port 4222, .mcpbus in dir).
func where(dir string, env, args []string) (natsURL, dataDir string) {
	port, data := "4222", ".mcpbus"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "MCPBUS_NATS_PORT="); ok {
			port = v
		}
		if v, ok := strings.CutPrefix(kv, "MCPBUS_DATA_DIR="); ok {
			data = v
		}
	}
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "--nats-port":
			port = args[i+1]
		case "--data-dir":
			data = args[i+1]
		}
	}
	if !filepath.IsAbs(data) {
		data = filepath.Join(dir, data)
	}
	return "nats://127.0.0.1:" + port, data
}

// NATSURL is the URL of the up's NATS server.
func (u *Up) NATSURL() string { return u.natsURL }

// HTTPURL is the gateway's base URL (http://host:port) when StartUp chose
// the ports, "" otherwise.
func (u *Up) HTTPURL() string { return u.httpURL }

// DataDir is the up's data dir, where the CLI finds the operator identity.
func (u *Up) DataDir() string { return u.dataDir }

// CLI runs client commands against this up as its operator.
func (u *Up) CLI() CLI {
	return CLI{Bin: u.bin, NATS: u.natsURL, DataDir: u.dataDir}
}

// Output is the up's log so far.
func (u *Up) Output() string { return u.logs.String() }

// Tail is the last n bytes of the up's log.
func (u *Up) Tail(n int) string { return u.logs.Tail(n) }

// Exited reports whether the up has ended.
func (u *Up) Exited() bool {
	select {
	case <-u.done:
		return true
	default:
		return false
	}
}

// Err is how the up ended (nil: exit code 0), nil while it runs.
func (u *Up) Err() error {
	if !u.Exited() {
		return nil
	}
	return u.err
}

// Stop sends SIGTERM and waits for the up to exit, failing the test unless
// it exits 0 within. It returns how long the up took to exit.
func (u *Up) Stop(t testing.TB, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	if err := u.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM to mcpbus up: %v", err)
	}
	select {
	case <-u.done:
	case <-time.After(within):
		t.Fatalf("mcpbus up did not exit within %s of SIGTERM", within)
	}
	took := time.Since(start)
	var exit *exec.ExitError
	switch {
	case errors.As(u.err, &exit):
		t.Fatalf("mcpbus up exited %d after SIGTERM, want 0", exit.ExitCode())
	case u.err != nil:
		t.Fatalf("mcpbus up: %v", u.err)
	}
	return took
}

// CLI runs mcpbus client commands against one bus.
type CLI struct {
	// Bin is the built mcpbus.
	Bin string
	// NATS is the bus's URL, passed as --nats.
	NATS string
	// DataDir, when set, is passed as MCPBUS_DATA_DIR: the CLI finds the
	// operator identity of an mcpbus up there.
	DataDir string
	// Env is the commands' environment (before MCPBUS_DATA_DIR); nil gives
	// Env().
	Env []string
	// Timeout bounds each command Run and RunInput run; zero is 30s.
	Timeout time.Duration
}

// Command is an mcpbus command with args against c.NATS in c's environment,
// not started; ctx kills it as exec.CommandContext does.
func (c CLI) Command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, c.Bin, append([]string{"--nats", c.NATS}, args...)...)
	cmd.Env = c.Env
	if cmd.Env == nil {
		cmd.Env = Env()
	}
	if c.DataDir != "" {
		cmd.Env = append(slices.Clip(cmd.Env), "MCPBUS_DATA_DIR="+c.DataDir)
	}
	return cmd
}

// Result is the outcome of one CLI command.
type Result struct {
	Args           []string // after --nats URL
	Stdout, Stderr string
	Code           int // exit code
}

func (r Result) String() string {
	return fmt.Sprintf("mcpbus %s: exit %d, stdout %q, stderr %q", strings.Join(r.Args, " "), r.Code, r.Stdout, r.Stderr)
}

// Run runs one command to its end, its stdin empty. A command that cannot
// start fails the test; its exit code is the Result's Code (-1 when killed,
// as at c.Timeout).
func (c CLI) Run(t testing.TB, args ...string) Result {
	t.Helper()
	return c.run(t, nil, args)
}

// RunInput is Run with stdin fed from stdin.
func (c CLI) RunInput(t testing.TB, stdin string, args ...string) Result {
	t.Helper()
	return c.run(t, strings.NewReader(stdin), args)
}

func (c CLI) run(t testing.TB, stdin io.Reader, args []string) Result {
	t.Helper()
	timeout := c.Timeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	cmd := c.Command(ctx, args...)
	cmd.Stdin = stdin
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := Result{Args: args, Stdout: stdout.String(), Stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.Code = exit.ExitCode()
	case err != nil:
		t.Fatalf("mcpbus %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// PID is the process id of mcpbus up.
func (u *Up) PID() int { return u.cmd.Process.Pid }
