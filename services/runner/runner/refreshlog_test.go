package runner_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testmcp"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// A server whose tool list the runner cannot take (here: tools/list
// answers an error), sending list_changed without end, failed each re-list:
// a WARN twice a second for as long as it ran. The first failure is logged,
// then at most one a minute per server.
func TestRefusedToolListLoggedOnceAMinute(t *testing.T) {
	var logs syncBuffer
	opts := quickOpts()
	opts.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	e := runnertest.Start(t, opts)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var refuse atomic.Bool
	refused := testmcp.AnswerMethod("tools/list", func(w http.ResponseWriter, _ *http.Request, id json.RawMessage) {
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": -32603, "message": "no list today"}})
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})
	wrap := func(h http.Handler) http.Handler {
		r := refused(h)
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if refuse.Load() {
				r.ServeHTTP(w, req)
				return
			}
			h.ServeHTTP(w, req)
		})
	}
	url := testmcp.ServeServerHTTP(t, testmcp.NewListChangedStormServer(ctx, "storm", 50*time.Millisecond, nil), nil, wrap)
	e.Put(t, model.McpConfig{Name: "storm", Enabled: true, Package: model.Package{Type: model.PackageHTTP, Identifier: url},
		Transport: model.Transport{Type: model.TransportHTTP, URL: url}, Runtime: model.Runtime{Eager: true}})
	e.WaitState(t, "storm", model.StateRunning, 10*time.Second)
	refuse.Store(true)
	time.Sleep(3 * time.Second) // some six re-lists, each refused
	n := strings.Count(logs.String(), "refreshing tools failed")
	if n != 1 {
		t.Fatalf("%d records of a refused tool list in 3 s of list_changed, want 1:\n%.3000s", n, logs.String())
	}
}
