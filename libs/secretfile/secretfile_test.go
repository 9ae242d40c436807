package secretfile

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestLoadOrCreateOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "key")
	var wg sync.WaitGroup
	got := make([]string, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			data, err := LoadOrCreate(path, 64, func() ([]byte, error) { return []byte(strings.Repeat(string(rune('a'+i)), 8)), nil })
			if err != nil {
				t.Error(err)
			}
			got[i] = string(data)
		}()
	}
	wg.Wait()
	for _, g := range got {
		if g != got[0] {
			t.Fatalf("creators disagree: %q", got)
		}
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode().Perm())
	}
}

func TestReadRefuses(t *testing.T) {
	dir := t.TempDir()
	open := filepath.Join(dir, "open")
	if err := os.WriteFile(open, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(open, 10); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("world-readable: %v", err)
	}
	long := filepath.Join(dir, "long")
	if err := os.WriteFile(long, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(long, 5); err == nil {
		t.Error("a file over the limit was read")
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(long, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(link, 50); err == nil {
		t.Error("a symlink was read")
	}
}
