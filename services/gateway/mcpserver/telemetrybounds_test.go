package mcpserver_test

import (
	"strings"
	"testing"

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
