package cli

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestDocsCLICurrent fails when docs/cli is not what the commands generate
// now: a changed flag or command needs `make docs`.
func TestDocsCLICurrent(t *testing.T) {
	want := t.TempDir()
	if err := WriteDocs(want); err != nil {
		t.Fatal(err)
	}
	have := filepath.Join("..", "..", "..", "..", "docs", "cli")
	names := func(dir string) []string {
		files, err := filepath.Glob(filepath.Join(dir, "*.md"))
		if err != nil {
			t.Fatal(err)
		}
		for i, f := range files {
			files[i] = filepath.Base(f)
		}
		return files
	}
	if w, h := names(want), names(have); !slices.Equal(w, h) {
		t.Fatalf("docs/cli has pages %v, the commands make %v: run make docs", h, w)
	}
	for _, name := range names(want) {
		w, _ := os.ReadFile(filepath.Join(want, name))
		h, err := os.ReadFile(filepath.Join(have, name))
		if err != nil || string(w) != string(h) {
			t.Errorf("docs/cli/%s is not current (%v): run make docs", name, err)
		}
	}
	if len(names(want)) < 10 {
		t.Errorf("the generator made only %v", names(want))
	}
}
