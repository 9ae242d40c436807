package testkit

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// ProcOptions says what StartProc runs.
type ProcOptions struct {
	// Name names the process in messages and its log, <Dir>/<Name>.log.
	Name string
	Bin  string
	Args []string
	// Env is the process's whole environment; nil gives it the test's.
	Env []string
	// Dir is the log's directory: a new temporary one when empty.
	Dir string
}

// Proc is a binary a test runs as a child process, its stdout and stderr in
// a log file that outlives it, for the test to read and to show on failure.
type Proc struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // of Wait, set before done is closed
	// killed marks a process the test killed on purpose: StopAll skips it.
	killed atomic.Bool
}

// DieWithTest has the kernel kill cmd's process should the test process die
// first (Linux; elsewhere only the test's cleanup stops it). It sets
// cmd.SysProcAttr.
func DieWithTest(cmd *exec.Cmd) { cmd.SysProcAttr = deathSig() }

// StartProc starts a process that ends with the test: killed by the test's
// cleanup if it still runs then, and (on Linux) by the kernel should the test
// process die first, so no run leaves one behind.
func StartProc(t testing.TB, opts ProcOptions) *Proc {
	t.Helper()
	dir := opts.Dir
	if dir == "" {
		dir = t.TempDir()
	}
	p := &Proc{name: opts.Name, log: filepath.Join(dir, logName(opts.Name)), done: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(opts.Bin, opts.Args...)
	p.cmd.Env = opts.Env
	p.cmd.Stdout, p.cmd.Stderr = f, f
	DieWithTest(p.cmd)
	err = p.cmd.Start()
	_ = f.Close() // the child writes to a descriptor of its own
	if err != nil {
		t.Fatalf("starting %s: %v", opts.Name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if p.Exited() {
			return
		}
		_ = p.cmd.Process.Kill()
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			t.Errorf("%s (pid %d) still runs 10s after SIGKILL", p.name, p.cmd.Process.Pid)
		}
	})
	return p
}

// Name is the process's name in messages.
func (p *Proc) Name() string { return p.name }

// Log is the path of the process's log.
func (p *Proc) Log() string { return p.log }

// Kill ends the process with SIGKILL (no chance to clean up: a crash) and
// waits until it is gone.
func (p *Proc) Kill(t testing.TB) {
	t.Helper()
	p.killed.Store(true)
	if err := p.cmd.Process.Kill(); err != nil && !p.Exited() {
		t.Fatalf("killing %s: %v", p.name, err)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s (pid %d) still runs 10s after SIGKILL", p.name, p.cmd.Process.Pid)
	}
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is how the process ended (nil: exit code 0), nil while it runs.
func (p *Proc) Err() error {
	if !p.Exited() {
		return nil
	}
	return p.err
}

// Output is the process's log so far.
func (p *Proc) Output() string {
	data, _ := os.ReadFile(p.log)
	return string(data)
}

// Tail is the last n bytes of the process's log.
func (p *Proc) Tail(n int) string { return Tail(p.Output(), n) }

// WaitLog waits until the process's log holds marker, failing the test after
// within or at once if the process ends without logging it.
func (p *Proc) WaitLog(t testing.TB, marker string, within time.Duration) {
	t.Helper()
	WaitFor(t, within, func() (bool, string) {
		exited := p.Exited() // before reading: the log is complete once it exited
		out := p.Output()
		if strings.Contains(out, marker) {
			return true, ""
		}
		if exited {
			t.Fatalf("%s exited (%v) before logging %q:\n%s", p.name, p.err, marker, Tail(out, 4000))
		}
		return false, fmt.Sprintf("%s has not logged %q:\n%s", p.name, marker, Tail(out, 2000))
	})
}

// StopAll sends SIGTERM to every process at once, so they stop side by side,
// and fails the test for each that does not exit 0 within (in all). It
// returns how long after the signal each was seen to exit, in the order of
// procs: 0 for one that did not. Processes ended with Kill are skipped.
func StopAll(t testing.TB, procs []*Proc, within time.Duration) []time.Duration {
	t.Helper()
	start := time.Now()
	for _, p := range procs {
		if p.killed.Load() {
			continue
		}
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Errorf("SIGTERM to %s: %v", p.name, err)
		}
	}
	deadline := start.Add(within)
	took := make([]time.Duration, len(procs))
	for i, p := range procs {
		if p.killed.Load() {
			continue
		}
		select {
		case <-p.done:
		case <-time.After(time.Until(deadline)): // at once for each after the first that is late
			t.Errorf("%s did not exit within %s of SIGTERM", p.name, within)
			continue
		}
		took[i] = time.Since(start)
		var exit *exec.ExitError
		switch {
		case errors.As(p.err, &exit):
			t.Errorf("%s exited %d after SIGTERM, want 0", p.name, exit.ExitCode())
		case p.err != nil:
			t.Errorf("%s: %v", p.name, p.err)
		}
	}
	return took
}

// logName is the log file of a process named name: its name with anything
// but letters, digits, '-' and '_' turned into '-' (names may hold arguments).
func logName(name string) string {
	f := strings.FieldsFunc(name, func(r rune) bool {
		return !(r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	})
	return strings.Join(f, "-") + ".log"
}
