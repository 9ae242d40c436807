package mcpserver_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/telemetry"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/gateway/mcpserver"
)

// What a client writes does not become a metric label as it is: the
// protocol version it asks for in initialize (go-sdk negotiates another),
// a resource URI (one series per URI), an unknown tool's 64 KiB name.
func TestServerMetricsKeepClientStringsOut(t *testing.T) {
	reader := testkit.MeterReader(t)
	e := start(t, mcpserver.Options{NoAuth: true}, nil)
	e.addServer(t, "alpha", nil)

	asked := "9999-" + strings.Repeat("x", 64<<10)
	r := rawWith(t, e.url, "", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"`+asked+
		`","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`, map[string]string{"Mcp-Protocol-Version": ""})
	if r.session == "" {
		t.Fatalf("initialize: %d %s", r.status, r.body)
	}
	sid := r.session
	raw(t, e.url, "", sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	uri := "test://secret-looking/" + strings.Repeat("u", 300)
	raw(t, e.url, "", sid, `{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"`+uri+`"}}`)
	raw(t, e.url, "", sid, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"`+strings.Repeat("n", 64<<10)+`","arguments":{}}}`)
	raw(t, e.url, "", sid, `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"alpha__echo","arguments":{"message":"hi"}}}`)

	seen := 0
	for series := range testkit.Metrics(t, reader) {
		if !strings.HasPrefix(series, "mcp.server.operation.duration|") {
			continue
		}
		seen++
		if strings.Contains(series, "mcp.resource.uri") {
			t.Errorf("a series with the resource URI: %.200s…", series)
		}
		if strings.Contains(series, "xxxxxxxx") {
			t.Errorf("a series with the client's protocol version: %.200s…", series)
		}
		for _, label := range strings.Split(series, ",") {
			if len(label) > len("gen_ai.tool.name=")+telemetry.MaxLabelLen {
				t.Errorf("a label of %d bytes: %.100s…", len(label), label)
			}
		}
	}
	if seen < 3 {
		t.Errorf("%d series of mcp.server.operation.duration, want one per request", seen)
	}
}

// TestServerMetricsBoundClientNames: a client chooses the names it calls and
// asks for, and the ids of the tasks it asks about; each was a series of
// mcp.server.operation.duration (the SDK keeps 2000 a metric, then folds
// every new one, a real server's included, into one overflow series).
// Names of no server the gateway knows are Other, task ids are the span's
// alone: N+1000 of each leave a handful of series.
func TestServerMetricsBoundClientNames(t *testing.T) {
	reader := testkit.MeterReader(t)
	e := start(t, mcpserver.Options{NoAuth: true}, nil)
	e.addServer(t, "alpha", nil)
	sid := rawSession(t, e.url)

	const n = telemetry.MaxToolNames + 1000
	for i := range n {
		raw(t, e.url, "", sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"nosuch%d__t","arguments":{}}}`, i, i))
		raw(t, e.url, "", sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"alpha__nope%d","arguments":{}}}`, i, i))
		raw(t, e.url, "", sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"prompts/get","params":{"name":"random-%d"}}`, i, i))
		raw(t, e.url, "", sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tasks/get","params":{"taskId":"task-%d"}}`, i, i))
	}
	if r := raw(t, e.url, "", sid, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"alpha__echo","arguments":{"message":"hi"}}}`); r.status != 200 {
		t.Fatalf("alpha__echo: %d %s", r.status, r.body)
	}

	// The gateway records a request's sample once its answer is written.
	var series []string
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
		series = series[:0]
		echo := false
		for s := range testkit.Metrics(t, reader) {
			if strings.HasPrefix(s, "mcp.server.operation.duration|") {
				series = append(series, s)
				echo = echo || strings.Contains(s, "gen_ai.tool.name=alpha__echo")
			}
		}
		return echo, fmt.Sprintf("no series of alpha__echo among %v", series)
	})
	for _, s := range series {
		if strings.Contains(s, "mcpbus.task.id") {
			t.Errorf("a series with a task id: %s", s)
		}
	}
	// initialize, then tools/call, prompts/get, tasks/get of an unknown
	// name or id, by error.type, and alpha__echo.
	if max := 10; len(series) > max {
		t.Errorf("%d series of mcp.server.operation.duration after %d requests of client-chosen names, want at most %d: %.1000v", len(series), 4*n, max, series)
	}
}
