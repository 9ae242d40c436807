package cli

import (
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra/doc"
)

// WriteDocs writes the CLI reference into dir, one markdown file per
// command (cobra's generator over the same tree Main runs), after removing
// the markdown files there so a removed command leaves no page behind.
func WriteDocs(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	old, err := filepath.Glob(filepath.Join(dir, "*.md"))
	if err != nil {
		return err
	}
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			return err
		}
	}
	root := newRoot(&globals{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard})
	root.DisableAutoGenTag = true // no date: the pages change only with the commands
	return doc.GenMarkdownTree(root, dir)
}
