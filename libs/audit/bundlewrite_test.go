package audit

import (
	"os"
	"path/filepath"
	"testing"
)

// An export is 0600 whatever was at its path: an older export that others
// may read keeps no wider mode, and a symlink there (planted in a shared
// directory) is replaced, its target left alone.
func TestBundleWriteIsPrivate(t *testing.T) {
	dir := t.TempDir()
	b := &Bundle{Format: BundleFormat}
	old := filepath.Join(dir, "old.json")
	if err := os.WriteFile(old, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{old, link, filepath.Join(dir, "new.json")} {
		if err := b.Write(p); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s after Write: %v %v, want a regular 0600 file", p, fi.Mode(), err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ReadBundle(f)
		_ = f.Close()
		if err != nil || got.Format != BundleFormat {
			t.Fatalf("%s: %+v %v", p, got, err)
		}
	}
	if data, err := os.ReadFile(target); err != nil || string(data) != "keep" {
		t.Fatalf("the symlink's target was written: %q %v", data, err)
	}
}
