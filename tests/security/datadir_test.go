package security

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/tools/mcpbus/stack"
)

// TestDataDirOfAnotherUser: mcpbus up keeps every secret in its data dir
// (the identities' seeds, the secret store's key, admin.key, JetStream,
// pid files it kills by). A data dir another local user made in a shared
// place (a --data-dir under /tmp, made there first) or may swap is
// refused before anything is written in it; one of its own that others
// may read is made 0700.
func TestDataDirOfAnotherUser(t *testing.T) {
	start := func(dir string) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		st, err := stack.Start(ctx, stack.Options{DataDir: dir, InProcessOnly: true, Logger: slog.New(slog.DiscardHandler)})
		if err == nil {
			st.Close()
		}
		return err
	}
	refused := func(t *testing.T, dir, want string) {
		t.Helper()
		err := start(dir)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("data dir %s: want a refusal saying %q, got %v", dir, want, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "nats")); err == nil {
			t.Fatalf("identities were written into the refused data dir %s", dir)
		}
	}
	// A sticky world-writable place, as /tmp is.
	shared := t.TempDir()
	if err := os.Chmod(shared, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	t.Run("writable by others", func(t *testing.T) {
		dir := filepath.Join(shared, "open")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		refused(t, dir, "writable by others")
	})
	t.Run("inside a directory others may write", func(t *testing.T) {
		parent := filepath.Join(shared, "parent")
		if err := os.Mkdir(parent, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(parent, 0o777); err != nil { // no sticky bit: anyone may rename what it holds
			t.Fatal(err)
		}
		refused(t, filepath.Join(parent, "data"), "which others may write")
	})
	t.Run("readable by others is made private", func(t *testing.T) {
		dir := filepath.Join(shared, "readable")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o755); err != nil { // mkdir under umask 022
			t.Fatal(err)
		}
		if err := start(dir); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("data dir %s after start: %v, %v; want mode 0700", dir, fi.Mode(), err)
		}
	})
	// Another user's files need root to make.
	const other = 65534
	t.Run("made by another user", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("making another user's directory needs root")
		}
		for _, mode := range []os.FileMode{0o777, 0o700} {
			dir := filepath.Join(shared, "theirs-"+mode.String())
			if err := os.Mkdir(dir, mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(dir, other, other); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, mode); err != nil {
				t.Fatal(err)
			}
			refused(t, dir, "owned by uid 65534")
		}
	})
	t.Run("inside another user's directory", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("making another user's directory needs root")
		}
		parent := filepath.Join(shared, "their-parent")
		if err := os.Mkdir(parent, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(parent, other, other); err != nil {
			t.Fatal(err)
		}
		refused(t, filepath.Join(parent, "data"), "owned by uid 65534, who could replace it")
	})
	t.Run("a symlink another user planted", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("making another user's symlink needs root")
		}
		target := t.TempDir() // ours: where the link leads today
		link := filepath.Join(shared, "link")
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(link, other, other); err != nil {
			t.Fatal(err)
		}
		refused(t, link, "symlink owned by uid 65534")
	})
}
