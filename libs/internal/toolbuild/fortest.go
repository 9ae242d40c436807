package toolbuild

import (
	"context"
	"testing"
	"time"
)

// StartForTest builds (or reuses) spec's binary, waiting at most buildTimeout for the build, and
// runs start with its path; the server start returns is stopped when the test ends. Any failure,
// including a failed build, fails the test with the details, prefixed with pkg (the calling
// package's name, e.g. "vaulttest").
func StartForTest[S interface{ Stop() }](t testing.TB, pkg string, spec Spec, buildTimeout time.Duration,
	start func(bin string) (S, error)) S {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), buildTimeout)
	bin, err := Binary(ctx, spec)
	cancel()
	if err != nil {
		t.Fatalf("%s: cannot build %s: %v", pkg, spec.binaryName(), err)
	}
	s, err := start(bin)
	if err != nil {
		t.Fatalf("%s: %v", pkg, err)
	}
	t.Cleanup(s.Stop)
	return s
}
