// Package npmseed fills an npx server's own npm cache from the shared one
// before the runner starts it, so tests install offline what `make
// npm-deps` already downloaded.
//
// The runner gives every npx server its own cache, <cache>/_mcpbus/<slug>/npm
// (services/runner/internal/sandbox), so a server's first start would
// download its package (server-everything: 54 MB) however full the shared
// cache is. The seed hard-links the shared cache's files (content-addressed:
// npm checks their integrity when it reads them), which costs no copy.
package npmseed

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Cache is the shared npm cache: $npm_config_cache, else ~/.npm.
func Cache(t testing.TB) string {
	t.Helper()
	if c := os.Getenv("npm_config_cache"); c != "" {
		return c
	}
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(home, ".npm")
}

// Place seeds the own cache of the server slug, run by the runner's own
// uid, from the shared cache, replacing whatever a former server of that
// slug left. owner is the config id the runner will find in the place's
// owner file; "" writes none, and the runner then keeps the seed for
// whichever config it starts under slug first.
func Place(t testing.TB, slug, owner string) {
	t.Helper()
	base := Cache(t)
	place := filepath.Join(base, "_mcpbus", slug)
	if err := os.RemoveAll(place); err != nil {
		t.Fatal(err)
	}
	shared := filepath.Join(base, "_cacache")
	err := filepath.WalkDir(shared, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		to := filepath.Join(place, "npm", "_cacache", strings.TrimPrefix(path, shared))
		if d.IsDir() {
			return os.MkdirAll(to, 0o700)
		}
		return os.Link(path, to)
	})
	if err != nil {
		t.Fatalf("seeding %s's npm cache from %s: %v", slug, shared, err)
	}
	if owner == "" {
		return
	}
	if err := os.WriteFile(filepath.Join(place, ".mcpbus-owner"), []byte(owner), 0o600); err != nil {
		t.Fatal(err)
	}
}
