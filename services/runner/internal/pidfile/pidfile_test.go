package pidfile

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestReapKillsOrphansOfDeadRunners(t *testing.T) {
	dir := t.TempDir()
	// An orphan group left by a runner (pid 2^22-1, surely not alive).
	orphan, done := startGroup(t)
	dead := &Dir{path: dir, self: 4194303}
	if err := dead.Record("lost", orphan.Process.Pid, "m1"); err != nil {
		t.Fatal(err)
	}
	// A child of a live runner (this test process) must survive.
	live, _ := startGroup(t)
	mine, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	other := &Dir{path: dir, self: os.Getppid()} // alive: the go test parent
	if err := other.Record("kept", live.Process.Pid, "m2"); err != nil {
		t.Fatal(err)
	}
	// A stale file whose pid was reused by another process is not killed.
	stale := &Dir{path: dir, self: 4194302}
	if err := os.WriteFile(stale.file("reused"), []byte("1 12345\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n, err := mine.Reap(nil)
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

// A runner killed with SIGKILL leaves its servers' helpers behind: Pdeathsig
// ends the leader only. The next runner's reap ends them all, as a stop
// would: one under setsid, one double-forked under setsid (init's child),
// and, the group being proven the server's by a member carrying the marker,
// a member of the group that cleared its environment. Before, the reap
// killed the recorded group only, and only while its leader lived: all four
// lived on.
func TestReapEndsEscapedHelpers(t *testing.T) {
	dir := t.TempDir()
	out := t.TempDir()
	marker := "0123456789abcdef0123456789abcdef"
	leader := exec.Command("sh", "-c", `
setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $! > "$OUT/setsid"
( setsid sleep 601 </dev/null >/dev/null 2>&1 & echo $! > "$OUT/orphan" )
env -i sleep 602 </dev/null >/dev/null 2>&1 & echo $! > "$OUT/cleared"
sleep 603 </dev/null >/dev/null 2>&1 & echo $! > "$OUT/member"
echo > "$OUT/ready"
exec sleep 604`)
	leader.Env = append(os.Environ(), "OUT="+out, "MCPBUS_LAUNCH="+marker)
	leader.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := leader.Start(); err != nil {
		t.Fatal(err)
	}
	names := []string{"setsid", "orphan", "cleared", "member"}
	helpers := waitPids(t, out, names)
	defer func() {
		for _, pid := range helpers {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}()
	dead := &Dir{path: dir, self: 4194303}
	if err := dead.Record("lost", leader.Process.Pid, marker); err != nil {
		t.Fatal(err)
	}
	// The runner dies: Pdeathsig kills the leader alone.
	_ = leader.Process.Kill()
	_ = leader.Wait()
	for i, pid := range helpers {
		if !running(pid) {
			t.Fatalf("%s helper %d died with the leader", names[i], pid)
		}
	}
	mine, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := mine.Reap(nil); err != nil || n != 1 {
		t.Fatalf("reaped %d (%v), want 1", n, err)
	}
	for i, pid := range helpers {
		waitGone(t, names[i], pid)
	}
}

// A recorded group whose leader is not the process recorded and none of
// whose processes carries the marker may be another's by now (its number
// reused): the reap leaves it alone.
func TestReapSparesReusedNumbers(t *testing.T) {
	dir := t.TempDir()
	other, _ := startGroup(t)
	dead := &Dir{path: dir, self: 4194303}
	// Another start time: the recorded leader died and its pid was reused.
	if err := os.WriteFile(dead.file("gone"), fmt.Appendf(nil, "%d 12345 %s 0\n", other.Process.Pid, "0123456789abcdef0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	mine, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := mine.Reap(nil); err != nil || n != 0 {
		t.Fatalf("reaped %d (%v), want 0", n, err)
	}
	time.Sleep(100 * time.Millisecond)
	if !running(other.Process.Pid) {
		t.Fatal("a group that reused a recorded number was killed")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*.pid")); len(left) != 0 {
		t.Fatalf("files left: %v", left)
	}
}

// A runner whose pid another process took since it died is dead all the
// same: its start time is recorded.
func TestReapSeesThroughAReusedRunnerPid(t *testing.T) {
	dir := t.TempDir()
	orphan, done := startGroup(t)
	// The go test parent is alive, but started at another time than recorded.
	ppid := os.Getppid()
	start, err := startTime(ppid)
	if err != nil {
		t.Fatal(err)
	}
	dead := &Dir{path: dir, self: ppid, selfStart: start + 1}
	if err := dead.Record("lost", orphan.Process.Pid, "0123456789abcdef0123456789abcdef"); err != nil {
		t.Fatal(err)
	}
	mine, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := mine.Reap(nil); err != nil || n != 1 {
		t.Fatalf("reaped %d (%v), want 1", n, err)
	}
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Fatal("orphan still alive")
	}
}

// waitPids reads the pids the helpers wrote to dir once dir/ready exists.
func waitPids(t *testing.T, dir string, names []string) []int {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the helpers did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var pids []int
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	return pids
}

// running reports whether pid runs (a zombie does not: init reaps it).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !strings.Contains(string(b), ") Z ")
}

func waitGone(t *testing.T, name string, pid int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for running(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("%s helper %d still alive after the reap", name, pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A pid file is never seen part-written: Record replaces it whole, so a
// runner killed while it rewrites one (a server's restart) leaves the old
// record or the new one, never a truncated file that the next runner's Reap
// would delete without ending what it named. A reader racing the rewrites
// stands for that next runner; os.WriteFile (truncate, then write) showed
// it empty files.
func TestRecordNeverShowsAPartialFile(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Record("alpha", os.Getpid(), "m1"); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	bad := make(chan string, 1)
	go func() {
		defer close(bad)
		for {
			select {
			case <-stop:
				return
			default:
			}
			data, err := os.ReadFile(d.file("alpha"))
			if err != nil {
				bad <- err.Error()
				return
			}
			if _, ok := parse(data); !ok {
				bad <- fmt.Sprintf("%q", data)
				return
			}
		}
	}()
	for i := 0; i < 1000; i++ {
		select {
		case got := <-bad:
			t.Fatalf("a reader saw the pid file part-written: %s", got)
		default:
		}
		if err := d.Record("alpha", os.Getpid(), "m"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	if got, ok := <-bad; ok {
		t.Fatalf("a reader saw the pid file part-written: %s", got)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("files left: %v, want the pid file alone", names)
	}
}

// Reap removes the temporary files of a dead runner's unfinished writes,
// and leaves a live runner's.
func TestReapRemovesUnfinishedWrites(t *testing.T) {
	dir := t.TempDir()
	dead := filepath.Join(dir, "4194303-lost.pid.123.tmp")
	live := filepath.Join(dir, fmt.Sprintf("%d-kept.pid.456.tmp", os.Getppid()))
	for _, p := range []string{dead, live} {
		if err := os.WriteFile(p, []byte("12"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Reap(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Fatalf("a dead runner's temporary file is still there (%v)", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Fatalf("a live runner's temporary file is gone: %v", err)
	}
}

// startGroup starts a sleep in a process group of its own, killed when the
// test ends unless it ended before; done has its Wait's result.
func startGroup(t *testing.T) (*exec.Cmd, <-chan error) {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done, exited := make(chan error, 1), make(chan struct{})
	go func() { done <- cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	return cmd, done
}
