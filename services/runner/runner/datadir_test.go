package runner_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/services/runner/runner"
)

// TestNewRefusesSharedDataDir: MCP servers run as another uid and, without
// Landlock, only file modes keep them out of the runner's data dir (the pid
// files it kills by). New refuses a data dir others may write (a Kubernetes
// emptyDir: 0777, root's) or another user owns, or one inside a directory
// others may write without the sticky bit; it makes its own readable one
// 0700.
func TestNewRefusesSharedDataDir(t *testing.T) {
	ns, err := embednats.Start(embednats.Options{Port: -1, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	nc, err := ns.ConnectTCP()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	newRunner := func(dir string) error {
		opts := quickOpts()
		opts.DataDir = dir
		_, err := runner.New(nc, opts)
		return err
	}
	mkdir := func(mode os.FileMode) string {
		dir := filepath.Join(t.TempDir(), "data")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		return dir
	}
	refused := func(dir, want string) {
		t.Helper()
		if err := newRunner(dir); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("data dir %s: error %v, want one saying %q", dir, err, want)
		}
	}

	refused(mkdir(0o777), "writable by others")
	open := mkdir(0o777)
	refused(filepath.Join(open, "data"), "which others may write")

	readable := mkdir(0o755)
	if err := newRunner(readable); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(readable); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("data dir %s after New: %v, %v; want mode 0700", readable, fi.Mode(), err)
	}

	// The chart's case: the runner's uid is not the dir's owner.
	if os.Geteuid() == 0 {
		theirs := mkdir(0o700)
		if err := os.Chown(theirs, 65532, 65532); err != nil {
			t.Fatal(err)
		}
		refused(theirs, "owned by uid 65532")
	}
}
