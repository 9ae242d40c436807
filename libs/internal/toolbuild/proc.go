package toolbuild

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// killWait bounds the wait for a killed process to be reaped.
const killWait = 10 * time.Second

// Proc is a tool running as a child process of a test.
type Proc struct {
	// Stderr holds the tail of the child's stderr, to explain a failure.
	Stderr *TailBuffer

	cmd     *exec.Cmd
	done    chan struct{} // closed once the process has exited and been reaped
	waitErr error         // set before done is closed
	once    sync.Once
}

// Start starts cmd so that the kernel kills it when the test process dies (on Linux), with its
// stderr kept in Proc.Stderr unless cmd.Stderr is already set, and reaps it when it exits.
func Start(cmd *exec.Cmd) (*Proc, error) {
	p := &Proc{cmd: cmd, done: make(chan struct{}), Stderr: &TailBuffer{Max: 64 << 10}}
	if cmd.Stderr == nil {
		cmd.Stderr = p.Stderr
	}
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Pid is the child's process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is how the process ended (nil for exit status 0); valid once Done is closed.
func (p *Proc) Err() error {
	<-p.done
	return p.waitErr
}

// Stop ends the process with SIGTERM, and kills it if it has not exited within timeout. It is
// safe to call more than once and after Kill.
func (p *Proc) Stop(timeout time.Duration) {
	p.once.Do(func() {
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			_ = p.cmd.Process.Kill() // no SIGTERM on this platform
		}
		timer := time.NewTimer(timeout)
		defer timer.Stop()
		select {
		case <-p.done:
		case <-timer.C:
			_ = p.cmd.Process.Kill()
			p.waitDone()
		}
	})
}

// Kill ends the process at once with SIGKILL, as a crash would.
func (p *Proc) Kill() {
	p.once.Do(func() {
		_ = p.cmd.Process.Kill()
		p.waitDone()
	})
}

func (p *Proc) waitDone() {
	timer := time.NewTimer(killWait)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C: // a killed process is reaped at once; give up rather than hang the test
	}
}

// TailBuffer keeps the last Max bytes written to it: enough of a child's output to explain a
// failure without holding an unbounded log.
type TailBuffer struct {
	Max int

	mu  sync.Mutex
	buf []byte
}

func (b *TailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.Max; over > 0 {
		b.buf = b.buf[over:]
	}
	return len(p), nil
}

func (b *TailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(bytes.TrimSpace(b.buf))
}
