package testmcp

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// Build compiles the mcpbus-testserver command into dir and returns its path.
// Tests call it once from TestMain; the Go build cache makes repeats cheap.
func Build(dir string) (string, error) {
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("testmcp: cannot locate source")
	}
	out := filepath.Join(dir, "mcpbus-testserver")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/mcpbus-testserver")
	cmd.Dir = filepath.Dir(self)
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("testmcp: building test server: %w", err)
	}
	return out, nil
}
