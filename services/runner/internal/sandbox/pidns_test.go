package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A child is the init of a PID namespace of its own: it is pid 1 there,
// and when it exits the kernel ends every process it left behind, one that
// left its session and cleared its environment included.
func TestChildIsInitOfItsOwnPIDNamespace(t *testing.T) {
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if !s.PIDNamespace() {
		t.Skip("this host refuses PID namespaces: " + mustSummary(s))
	}
	if os.Getenv(asOtherUser) == "" {
		// As root the namespace is made directly; another user makes it
		// inside a user namespace of its own: this test again, as nobody.
		defer runAsNobody(t, "TestChildIsInitOfItsOwnPIDNamespace")
	}
	out := t.TempDir()
	if err := os.Chmod(out, 0o777); err != nil { // a child of another uid writes there too
		t.Fatal(err)
	}
	// The escaped process writes its pid as the host sees it: its own
	// /proc/self/stat, read through the host's /proc.
	cmd := exec.Command("/bin/sh", "-c", `echo $$ > "$OUT/self"
readlink /proc/self/ns/pid > "$OUT/ns"
env -i OUT="$OUT" setsid /bin/sh -c 'read -r p _ < /proc/self/stat; echo $p > "$OUT/escaped.tmp"; mv "$OUT/escaped.tmp" "$OUT/escaped"; exec sleep 600' </dev/null >/dev/null 2>&1 &
while [ ! -s "$OUT/escaped" ]; do sleep 0.01; done`)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir(), "OUT=" + out}
	_, got := runConfined(t, s, cmd, Spec{Command: cmd.Path, Allow: []string{out}})
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatalf("%s: %v (child said %q)", name, err, got)
		}
		return strings.TrimSpace(string(b))
	}
	if self := read("self"); self != "1" {
		t.Fatalf("the child is pid %s in its namespace, want 1", self)
	}
	own, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		t.Fatal(err)
	}
	if ns := read("ns"); ns == own || !strings.HasPrefix(ns, "pid:[") {
		t.Fatalf("the child's PID namespace %q is the runner's (%s)", ns, own)
	}
	pid, err := strconv.Atoi(read("escaped"))
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGKILL)
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if err := syscall.Kill(pid, 0); err != nil {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("process %d, which left the child's session and environment, outlived the child", pid)
		}
	}
}

// asOtherUser is set in the environment of a test binary runAsNobody runs.
const asOtherUser = "MCPBUS_TEST_AS_OTHER_USER"

// runAsNobody runs test in a copy of this test binary as uid 65534 (the
// copy: go test's build directory is closed to other users), when this one
// runs as root.
func runAsNobody(t *testing.T, test string) {
	if os.Geteuid() != 0 {
		return
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "mcpbus-sandbox-test-") // t.TempDir's parent is closed to others
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "sandbox.test")
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^"+test+"$", "-test.v", "-test.count=1")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", "TMPDIR=/tmp", asOtherUser + "=1"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	switch {
	case strings.Contains(string(out), "--- SKIP"):
		t.Logf("as uid 65534: skipped: %s", out)
	case err != nil || !strings.Contains(string(out), "--- PASS"):
		t.Fatalf("as uid 65534: %v\n%s", err, out)
	default:
		t.Logf("as uid 65534: passed")
	}
}

func mustSummary(s *Sandbox) string {
	msg, _ := s.Summary()
	return msg
}
