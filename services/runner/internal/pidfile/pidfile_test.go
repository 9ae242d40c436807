package pidfile

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func TestReapKillsOrphansOfDeadRunners(t *testing.T) {
	dir := t.TempDir()
	// An orphan group left by a runner (pid 2^22-1, surely not alive).
	orphan := exec.Command("sleep", "60")
	orphan.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- orphan.Wait() }()
	dead := &Dir{path: dir, self: 4194303}
	if err := dead.Record("lost", orphan.Process.Pid); err != nil {
		t.Fatal(err)
	}
	// A child of a live runner (this test process) must survive.
	live := exec.Command("sleep", "60")
	live.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = live.Process.Kill(); _ = live.Wait() }()
	mine, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	other := &Dir{path: dir, self: os.Getppid()} // alive: the go test parent
	if err := other.Record("kept", live.Process.Pid); err != nil {
		t.Fatal(err)
	}
	// A stale file whose pid was reused by another process is not killed.
	stale := &Dir{path: dir, self: 4194302}
	if err := os.WriteFile(stale.file("reused"), []byte("1 12345\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n, err := mine.Reap()
	if err != nil || n != 1 {
		t.Fatalf("reaped %d (%v), want 1", n, err)
	}
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Fatal("orphan still alive")
	}
	if err := syscall.Kill(live.Process.Pid, 0); err != nil {
		t.Fatal("a live runner's child was killed")
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*.pid"))
	if len(left) != 1 {
		t.Fatalf("files left: %v, want only the live runner's", left)
	}
}
