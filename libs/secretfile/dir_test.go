//go:build unix

package secretfile

import (
	"os"
	"path/filepath"
	"testing"
)

// A directory writable by this user's primary group only (umask 002 under
// user private groups) is this user's: accepted and made 0700; missing
// ones are made 0700.
func TestPrivateDirOwnGroup(t *testing.T) {
	parent := t.TempDir()
	if err := os.Chmod(parent, 0o775); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(parent, "data")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o775); err != nil {
		t.Fatal(err)
	}
	if err := PrivateDir(dir); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, filepath.Join(dir, "a", "b")} {
		if d != dir {
			if err := PrivateDir(d); err != nil {
				t.Fatal(err)
			}
		}
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("%s: %v %v, want 0700", d, fi.Mode(), err)
		}
	}
	if err := PrivateDir(filepath.Join(dir, "a", "b", "..", "..")); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := PrivateDir(file); err == nil {
		t.Fatal("a file was taken for a directory")
	}
}
