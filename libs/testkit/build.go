package testkit

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// RepoRoot is the repository's top directory (found from this file's path).
func RepoRoot() (string, error) {
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("testkit: cannot locate source")
	}
	return filepath.Join(filepath.Dir(self), "..", ".."), nil
}

// BuildCommand returns a BuildFunc (for WithBinary) that builds the command
// at pkg, a path from the repository's top (./tools/mcpbus), into a new
// temporary directory as name.
func BuildCommand(name, pkg string) BuildFunc {
	return func() (string, func(), error) {
		root, err := RepoRoot()
		if err != nil {
			return "", nil, err
		}
		dir, err := os.MkdirTemp("", name)
		if err != nil {
			return "", nil, err
		}
		path := filepath.Join(dir, name)
		cmd := exec.Command("go", "build", "-o", path, pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			_ = os.RemoveAll(dir)
			return "", nil, fmt.Errorf("testkit: go build %s: %w\n%s", pkg, err, out)
		}
		return path, func() { _ = os.RemoveAll(dir) }, nil
	}
}
