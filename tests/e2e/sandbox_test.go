package e2e

import (
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// TestEverythingNpxSandboxed runs the published server-everything through
// npx with the children's sandbox on and a data dir under /tmp (so /tmp is
// never granted, only the child's private temp dir): npx, node and the npm
// cache still work, and the runner says which protection is active. Not
// parallel: it runs before the parallel tests, so no other npx of the package
// (TestEverything's) installs into the npm cache beside it.
func TestEverythingNpxSandboxed(t *testing.T) {
	t.Run("landlock", func(t *testing.T) { everythingNpxSandboxed(t, 0) })
	// As another user, npx fills the server's own npm cache (from the
	// registry) in a HOME the runner made for it.
	t.Run("uid", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("the uid switch needs root (CI runs as root)")
		}
		everythingNpxSandboxed(t, 65534)
	})
}

func everythingNpxSandboxed(t *testing.T, uid int) {
	npmModules(t)
	logs := &testkit.LogBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("runner log:\n%s", logs.Tail(8000))
		}
	})
	// As root the server's own npm cache is seeded from the shared one; as
	// another user npx downloads the package (54 MB) into its own. Either
	// took over 60 s on a loaded CI: its start may take 150 s there.
	cfg, start, wait := everythingNpx(), 150*time.Second, 160*time.Second
	if uid == 0 {
		cfg = everythingNpxSeeded(t)
	}
	e := runnertest.Start(t, runner.Options{
		StopGrace: 100 * time.Millisecond, StopTimeout: 3 * time.Second, StartTimeout: start,
		DataDir: t.TempDir(), ChildUID: uid,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	cfg = e.Put(t, cfg)
	e.WaitState(t, cfg.Slug, model.StateRunning, wait)
	if got := call(t, e, cfg.Slug, "echo", `{"message":"sandboxed"}`); !strings.Contains(got, "sandboxed") {
		t.Fatalf("echo returned %q", got)
	}
	const want = "children sandboxed: "
	log := logs.String()
	i := strings.Index(log, want)
	if i < 0 {
		t.Fatalf("the runner did not log %q at start", want)
	}
	line, _, _ := strings.Cut(log[i:], "\n")
	t.Log(line)
}
