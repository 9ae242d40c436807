package sandbox

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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
		var out bytes.Buffer
		cmd.Stdout = &out
		child, err := s.Prepare(cmd, Spec{Command: cmd.Path}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := child.Start(); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		child.Exited()
		got := out.String()
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
