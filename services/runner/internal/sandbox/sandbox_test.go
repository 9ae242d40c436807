package sandbox

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/mcpbus/mcpbus/libs/testkit"
)

// A child started through Start is confined; the process that started it
// (every thread of it) is not.
func TestStartConfinesChildOnly(t *testing.T) {
	if LandlockABI() == 0 {
		t.Skip("the kernel has no Landlock")
	}
	data := t.TempDir()
	secret := filepath.Join(data, "seed")
	if err := os.WriteFile(secret, []byte("SUAFAKE"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Protected: []Protected{{data, "data dir"}}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 { // several starts: no restricted thread is reused
		cmd := exec.Command("/bin/sh", "-c", `cat "$1" 2>&1; echo; cat /etc/hostname >/dev/null && echo etc-ok; echo x > "$TMPDIR/f" && echo tmp-ok`, "sh", secret)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
		child, got := runConfined(t, s, cmd, Spec{Command: cmd.Path})
		if strings.Contains(got, "SUAFAKE") || !strings.Contains(got, "Permission denied") {
			t.Fatalf("start %d: the child read the protected file or failed otherwise: %q", i, got)
		}
		if !strings.Contains(got, "tmp-ok") {
			t.Fatalf("start %d: the child cannot write its TMPDIR: %q", i, got)
		}
		if _, err := os.Stat("/etc/hostname"); err == nil && !strings.Contains(got, "etc-ok") {
			t.Fatalf("start %d: the child cannot read /etc: %q", i, got)
		}
		if _, err := os.Stat(child.tmp); !os.IsNotExist(err) {
			t.Fatalf("start %d: the private temp dir %s outlived the child", i, child.tmp)
		}
		// The runner reads it still, from whatever thread runs this goroutine.
		if b, err := os.ReadFile(secret); err != nil || string(b) != "SUAFAKE" {
			t.Fatalf("the starting process lost access: %q %v", b, err)
		}
	}
}

// A confined child of the same (non-root) uid reads nothing of the process
// that started it through /proc: not its environment, from any of its
// threads, the one that forked the child (in the child's Landlock domain)
// included. A root child reads it regardless (a root runner needs a uid
// switch), so this runs as another user: go test -c, then run the binary
// as that user.
func TestChildReadsNoRunnerEnviron(t *testing.T) {
	if LandlockABI() == 0 {
		t.Skip("the kernel has no Landlock")
	}
	if os.Geteuid() == 0 {
		t.Skip("as root the child is root too, and reads it regardless: run the test binary as another user")
	}
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", `for f in /proc/$1/environ /proc/$1/task/*/environ; do cat "$f" >/dev/null 2>&1 && echo "read $f"; done; echo tried`, "sh", strconv.Itoa(os.Getpid()))
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
	if _, got := runConfined(t, s, cmd, Spec{Command: cmd.Path}); !strings.Contains(got, "tried") || strings.Contains(got, "read ") {
		t.Fatalf("the child read the runner's environment: %q", got)
	}
}

// runConfined prepares cmd (Path, Args and Env set) with spec, runs it to its
// end and returns the child and what it wrote to stdout and stderr.
func runConfined(t *testing.T, s *Sandbox, cmd *exec.Cmd, spec Spec) (*Child, string) {
	t.Helper()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	child, err := s.Prepare(cmd, spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	child.Exited()
	return child, out.String()
}

// A relative protected path (mcpbus up's default data dir, ".mcpbus") is
// the runner's, whatever directory the child starts in: with --child-uid it
// starts in its own HOME, and the runner's working directory, which holds
// the data dir, must not be granted to it.
func TestRelativeProtectedPathIsTheRunners(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("switching users needs root")
	}
	wd := t.TempDir()
	if err := os.MkdirAll(filepath.Join(wd, ".mcpbus", "nats"), 0o700); err != nil {
		t.Fatal(err)
	}
	t.Chdir(wd)
	for _, uid := range []int{0, 65534} {
		s, err := New(Config{UID: uid, Protected: []Protected{{".mcpbus", "the runner's data dir"}}})
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("/bin/true")
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
		child, err := s.Prepare(cmd, Spec{Command: cmd.Path, Name: "x", Owner: "x"}, []Protected{{"keyfile", "a relative keyfile"}})
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range child.Plan().Grants {
			if g.Path == wd || within(filepath.Join(wd, ".mcpbus"), g.Path) || within(filepath.Join(wd, "keyfile"), g.Path) {
				t.Errorf("uid %d: the plan grants %s (write %v), which holds %s's protected paths", uid, g.Path, g.Write, wd)
			}
		}
	}
}

// A confined child reaches no terminal: not another one of its uid (a pty
// the user types in, whose input it could read or write to), not the
// runner's; the plain device files (/dev/null, /dev/urandom…) it keeps.
func TestChildOpensNoTerminal(t *testing.T) {
	if LandlockABI() == 0 {
		t.Skip("the kernel has no Landlock")
	}
	_, pts := testkit.OpenPTY(t) // stands for the terminal the user types in
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", `(exec 3<"$1") 2>/dev/null && echo "opened $1"; (exec 3</dev/tty) 2>/dev/null && echo "opened /dev/tty";
head -c 1 /dev/urandom >/dev/null && echo urandom-ok; echo x >/dev/null && echo null-ok; echo tried`, "sh", pts)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
	_, got := runConfined(t, s, cmd, Spec{Command: cmd.Path})
	if strings.Contains(got, "opened ") || !strings.Contains(got, "tried") {
		t.Fatalf("a confined child opened a terminal:\n%s", got)
	}
	for _, want := range []string{"urandom-ok", "null-ok"} {
		if !strings.Contains(got, want) {
			t.Fatalf("a confined child lost a plain device file (%s):\n%s", want, got)
		}
	}
}
