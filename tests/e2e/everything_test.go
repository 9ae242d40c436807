package e2e

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

// TestEverything runs the published server-everything through the runner,
// once by the path of its installed binary and once through npx, and drives
// it with the Go client: catalog, calls, other MCP methods, progress, stop.
func TestEverything(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		cfg     func(t *testing.T) model.McpConfig
		startIn time.Duration
	}{
		{"binary", func(t *testing.T) model.McpConfig { return everythingBin(t) }, 30 * time.Second},
		// npx unpacks the seeded package (54 MB) before the server starts:
		// past the runner's default 60 s twice on a loaded CI.
		{"npx", func(t *testing.T) model.McpConfig {
			npmModules(t)
			cfg := everythingNpxSeeded(t)
			cfg.Runtime.StartTimeout = model.Duration(150 * time.Second)
			return cfg
		}, 160 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg(t) // fails first if the npm packages are missing
			e := startBus(t)
			cfg = e.Put(t, cfg)
			st := e.WaitState(t, cfg.Slug, model.StateRunning, tc.startIn)
			if !alive(st.PID) {
				t.Fatalf("status says pid %d, but no such process", st.PID)
			}
			for _, want := range []string{"echo", "get-sum", "trigger-long-running-operation"} {
				if !slices.Contains(st.Tools, want) {
					t.Errorf("running status lists tools %v, want %q among them", st.Tools, want)
				}
			}

			// Catalog: namespaced names, subjects and the tools' own input schemas.
			tools, err := e.Client.ListTools(ctxFor(t, 10*time.Second), "everything")
			if err != nil {
				t.Fatal(err)
			}
			byTool := map[string]model.Tool{}
			for _, tool := range tools {
				byTool[tool.Tool] = tool
			}
			for tool, props := range map[string][]string{"echo": {"message"}, "get-sum": {"a", "b"}} {
				got, ok := byTool[tool]
				if !ok {
					t.Fatalf("tools.list has no %q: %v", tool, slices.Sorted(maps.Keys(byTool)))
				}
				if got.Name != "everything__"+tool || got.Server != "everything" || got.Subject != "mcp.v1.call.everything."+tool {
					t.Errorf("catalog entry of %s: name %q server %q subject %q", tool, got.Name, got.Server, got.Subject)
				}
				checkSchema(t, got, props...)
			}

			// Calls.
			if got := call(t, e, "everything", "echo", `{"message":"hi"}`); got != "Echo: hi" {
				t.Errorf("echo returned %q, want %q", got, "Echo: hi")
			}
			if got := call(t, e, "everything", "get-sum", `{"a":2,"b":3}`); !strings.Contains(got, "5") {
				t.Errorf("get-sum 2+3 returned %q, want it to contain 5", got)
			}
			// The namespaced name resolves through the catalog too.
			raw, err := e.Client.CallNamed(ctxFor(t, 10*time.Second), "everything__echo", json.RawMessage(`{"message":"named"}`), nil)
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := resultText(t, raw); got != "Echo: named" {
				t.Errorf("CallNamed echo returned %q", got)
			}

			// Other MCP methods over mcp.v1.rpc.everything.
			var resources struct {
				Resources []struct {
					URI  string `json:"uri"`
					Name string `json:"name"`
				} `json:"resources"`
			}
			if err := e.Client.RPC(ctxFor(t, 10*time.Second), "everything", "resources/list", nil, &resources); err != nil {
				t.Fatal(err)
			}
			if len(resources.Resources) == 0 || resources.Resources[0].URI == "" {
				t.Errorf("resources/list returned no resources: %+v", resources)
			}
			var prompts struct {
				Prompts []struct {
					Name string `json:"name"`
				} `json:"prompts"`
			}
			if err := e.Client.RPC(ctxFor(t, 10*time.Second), "everything", "prompts/list", nil, &prompts); err != nil {
				t.Fatal(err)
			}
			if len(prompts.Prompts) == 0 || prompts.Prompts[0].Name == "" {
				t.Errorf("prompts/list returned no prompts: %+v", prompts)
			}

			// Progress notifications reach the caller while the call runs.
			var mu sync.Mutex
			var events []model.ProgressEvent
			opts := &client.CallOptions{RequestID: "progress-" + tc.name, OnProgress: func(ev model.ProgressEvent) {
				mu.Lock()
				events = append(events, ev)
				mu.Unlock()
			}}
			raw, err = e.Client.Call(ctxFor(t, 20*time.Second), "everything", "trigger-long-running-operation",
				json.RawMessage(`{"duration":0.8,"steps":4}`), opts)
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := resultText(t, raw); !strings.Contains(got, "completed") {
				t.Errorf("long running operation returned %q", got)
			}
			mu.Lock()
			got := slices.Clone(events)
			mu.Unlock()
			t.Logf("progress events: %+v", got)
			if len(got) < 2 {
				t.Fatalf("got %d progress events, want at least 2: %+v", len(got), got)
			}
			for i, ev := range got {
				if ev.RequestID != opts.RequestID || ev.Total != 4 || ev.Progress < 1 || ev.Progress > 4 {
					t.Errorf("progress event %d: %+v, want request %s, total 4, progress 1..4", i, ev, opts.RequestID)
				}
				if i > 0 && ev.Progress <= got[i-1].Progress {
					t.Errorf("progress does not increase: %+v", got)
				}
			}

			// Stop: the whole process group goes, the catalog forgets the tools.
			stopped, err := e.Client.Runtime(ctxFor(t, 20*time.Second), "stop", "everything")
			if err != nil {
				t.Fatal(err)
			}
			if stopped.State != model.StateStopped {
				t.Errorf("stop answered state %q, want stopped", stopped.State)
			}
			waitGroupGone(t, st.PID, 10*time.Second)
			if s := e.Status("everything"); s.State != model.StateStopped {
				t.Errorf("status in KV is %q after stop, want stopped", s.State)
			}
			testkit.WaitFor(t, 5*time.Second, func() (bool, string) {
				tools, err := e.Client.ListTools(ctxFor(t, 5*time.Second), "everything")
				return err == nil && len(tools) == 0, "tools.list still lists the stopped server's tools"
			})
		})
	}
}
