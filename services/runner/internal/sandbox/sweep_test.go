package sandbox

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// sharedTemp is a temp dir shared as /tmp is (sticky, open to all: a
// switched child makes its own there), set as the process's TMPDIR.
func sharedTemp(t *testing.T) string {
	t.Helper()
	tmp, err := os.MkdirTemp("", "mcpbus-shared-tmp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	if err := os.Chmod(tmp, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", tmp)
	return tmp
}

// A runner killed outright leaves its children's private temp dirs, with
// what the servers wrote there, for a later server of the same uid to read.
// SweepTemp removes those whose lock no one holds (the dead runner's), and
// keeps a live runner's, another user's, the shared HOME, and whatever a
// symlink named like one points to.
func TestSweepTempRemovesOnlyDeadRunnersDirs(t *testing.T) {
	tmp := sharedTemp(t)
	cfg := Config{NoLandlock: true}
	const childUID = 65534
	if os.Geteuid() == 0 {
		cfg.UID = childUID // the children's dirs are that uid's
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	fill := func(dir string) {
		t.Helper()
		if err := s.asChild(func() error {
			if err := os.MkdirAll(filepath.Join(dir, "sub", "deeper"), 0o700); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dir, "sub", "deeper", "left"), []byte("a server's file"), 0o600)
		}); err != nil {
			t.Fatal(err)
		}
	}

	// Made as a runner makes them; the lock of the dead one is gone with
	// its descriptor, as with a runner killed.
	dead, deadLock, err := s.mkTemp()
	if err != nil {
		t.Fatal(err)
	}
	fill(dead)
	if err := unix.Close(deadLock); err != nil {
		t.Fatal(err)
	}
	live, liveLock, err := s.mkTemp()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if liveLock >= 0 {
			_ = unix.Close(liveLock)
		}
	}()
	fill(live)
	// One of an earlier runner of this uid without a child uid.
	own := filepath.Join(tmp, tempPrefix+"111")
	if err := os.MkdirAll(filepath.Join(own, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	want := []string{dead, own}

	// A symlink named like one, to a dir of the runner's uid.
	target := t.TempDir()
	targetFile := filepath.Join(target, "keep")
	if err := os.WriteFile(targetFile, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(tmp, tempPrefix+"222")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	// The shared HOME of switched children is not a temp dir.
	home := filepath.Join(tmp, "mcpbus-child-home-"+"65534")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	keep := []string{live, targetFile, link, home}
	if os.Geteuid() == 0 {
		other := filepath.Join(tmp, tempPrefix+"333") // another user's
		if err := os.Mkdir(other, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(other, 12345, 12345); err != nil {
			t.Fatal(err)
		}
		keep = append(keep, other)
	}

	n, err := s.SweepTemp()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range want {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s left (%v)", p, err)
		}
	}
	for _, p := range keep {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s removed: %v", p, err)
		}
	}
	if n != len(want) {
		t.Errorf("SweepTemp says %d removed, want %d", n, len(want))
	}

	// Once its runner is gone, the live one goes too.
	if err := unix.Close(liveLock); err != nil {
		t.Fatal(err)
	}
	liveLock = -1
	if n, err := s.SweepTemp(); err != nil || n != 1 {
		t.Errorf("second sweep: %d removed, %v; want 1", n, err)
	}
	if _, err := os.Lstat(live); !os.IsNotExist(err) {
		t.Errorf("%s left after its runner ended (%v)", live, err)
	}
}

// A dir a sweep holds (it is removing it) is not handed to a new child:
// its maker makes another.
func TestMkTempSkipsSweptDir(t *testing.T) {
	sharedTemp(t)
	s, err := New(Config{NoLandlock: true})
	if err != nil {
		t.Fatal(err)
	}
	dir, lock, err := s.mkTemp()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(lock)
	if _, err := lockTemp(dir); err != errSwept {
		t.Fatalf("locking a held dir again: %v, want errSwept", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := lockTemp(dir); err != errSwept {
		t.Fatalf("locking a removed dir: %v, want errSwept", err)
	}
}
