package runner_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testmcp"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// A server may send notifications/tools/list_changed without end. The
// runner re-lists at most twice a second (coalesce.go), but each re-list
// rewrote the server's catalog (KV mcp_tools, up to a bus message of tool
// JSON, read by every gateway, chat and runner) and published its status,
// an event stored in MCP_EVENTS: 170,000 events a day for a list that never
// changed, pushing other servers' events out of the stream. A re-list that
// finds the same tools writes nothing; a real change still goes out.
func TestListChangedStormOfAnUnchangedList(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	add := make(chan *mcp.Tool, 1)
	url := testmcp.ServeServerHTTP(t, testmcp.NewListChangedStormServer(ctx, "storm", 50*time.Millisecond, add), nil, nil)
	e.Put(t, model.McpConfig{Name: "storm", Enabled: true, Package: model.Package{Type: model.PackageHTTP, Identifier: url},
		Transport: model.Transport{Type: model.TransportHTTP, URL: url}, Runtime: model.Runtime{Eager: true}})
	e.WaitState(t, "storm", model.StateRunning, 10*time.Second)

	subj := bus.NewSubjects("")
	var statuses, catalogs atomic.Int32
	sub, err := e.NC.Subscribe(subj.Event("status", "storm"), func(*nats.Msg) { statuses.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	// The catalog's KV writes, as a watcher of mcp_tools sees them.
	ksub, err := e.NC.Subscribe("$KV.mcp_tools.storm", func(*nats.Msg) { catalogs.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ksub.Unsubscribe() })
	time.Sleep(2 * time.Second)
	if n, c := statuses.Load(), catalogs.Load(); n > 0 || c > 0 {
		t.Errorf("in 2 s of list_changed with an unchanged list: %d status events, %d catalog writes; want none", n, c)
	}

	add <- &mcp.Tool{Name: "echo2", Description: "Echoes its message again"}
	deadline := time.Now().Add(5 * time.Second)
	for catalogs.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if catalogs.Load() == 0 {
		t.Fatal("a tool added amid the storm never reached the catalog")
	}
}
