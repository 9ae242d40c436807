package search

import (
	"context"
	"encoding/json"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
	"github.com/mcpbus/mcpbus/tests/internal/clitest"
)

var update = flag.Bool("update", false, "rewrite testdata/npm-tools.json from the live servers")

const fixture = "testdata/npm-tools.json"

// recorded is the fixture: each server's tools as tools/list gives them.
type recorded struct {
	Note    string                  `json:"note"`
	Servers map[string][]model.Tool `json:"servers"`
}

func loadFixture(t testing.TB) recorded {
	t.Helper()
	data, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	var r recorded
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestFixtureIsCurrent starts the pinned npm servers (everything, and
// filesystem on a temporary root) under a runner and checks that their
// catalog is the recorded one: a new version of either fails it until the
// fixture is re-recorded (go test ./tests/search -run Fixture -update).
func TestFixtureIsCurrent(t *testing.T) {
	modules := filepath.Join(clitest.RepoRoot(t), "tests", "npm", "node_modules", ".bin")
	logs := &testkit.LogBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("runner log:\n%s", logs.Tail(6000))
		}
	})
	e := runnertest.Start(t, runner.Options{StopGrace: 100 * time.Millisecond, StopTimeout: 3 * time.Second,
		StartTimeout: 60 * time.Second, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	for _, cfg := range []model.McpConfig{
		runnertest.Binary("everything", filepath.Join(modules, "mcp-server-everything")),
		runnertest.Binary("filesystem", filepath.Join(modules, "mcp-server-filesystem"), t.TempDir()),
	} {
		cfg.Runtime.Eager = true
		e.Put(t, cfg)
	}
	live := recorded{Note: "tools/list of the npm servers pinned in tests/npm/package.json, as the runner catalogs them; re-record with go test ./tests/search -run Fixture -update",
		Servers: map[string][]model.Tool{}}
	for _, srv := range []string{"everything", "filesystem"} {
		e.WaitState(t, srv, model.StateRunning, 60*time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		tools, err := e.Client.ListTools(ctx, srv)
		cancel()
		if err != nil || len(tools) == 0 {
			t.Fatalf("tools of %s: %v (%d)", srv, err, len(tools))
		}
		for i := range tools {
			tools[i].Subject = "" // the bus's, not the server's
		}
		slices.SortFunc(tools, func(a, b model.Tool) int { return cmpString(a.Name, b.Name) })
		live.Servers[srv] = tools
	}
	got, _ := json.MarshalIndent(live, "", "  ")
	got = append(got, '\n')
	if *update {
		if err := os.WriteFile(fixture, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("%s is not what the pinned servers list now; re-record it with -update and re-check the recall pairs", fixture)
	}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
