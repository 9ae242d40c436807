package bus_test

import (
	"testing"

	"github.com/mcpbus/mcpbus/libs/bus"
)

// Span names and metric labels use the subject template: the server, tool
// and event names are placeholders, whatever the prefix.
func TestTemplate(t *testing.T) {
	for subject, want := range map[string]string{
		"mcp.v1.call.github.search_issues": "mcp.v1.call.{server}.{tool}",
		"acme.prod.mcp.call.fs.read":       "acme.prod.mcp.call.{server}.{tool}",
		"mcp.v1.rpc.github":                "mcp.v1.rpc.{server}",
		"mcp.v1.control.github":            "mcp.v1.control.{server}",
		"mcp.v1.control.github.all":        "mcp.v1.control.{server}.all",
		"control.github.all":               "control.{server}.all",
		"mcp.v1.cancel.github":             "mcp.v1.cancel.{server}",
		"mcp.v1.events.call.github":        "mcp.v1.events.call.{name}",
		"mcp.v1.config.create":             "mcp.v1.config.create",
		"mcp.v1.runtime.start":             "mcp.v1.runtime.start",
		"mcp.v1.tools.list":                "mcp.v1.tools.list",
		"mcp.v1.oauth.callback.Zq3xv9":     "mcp.v1.oauth.callback.{flow}",
		"mcp.v1.gateway.retry.7Hk2p":       "mcp.v1.gateway.retry.{instance}",
		"rpc.x":                            "rpc.{server}",
		"call":                             "call",
		"a.call":                           "a.call",
		"":                                 "",
		"_INBOX.OcDxrvHkH0msXMtcAAEpon":    "{inbox}",
		"_I.agent-demo.Zq3xv9.call.x.y":    "{inbox}",
		"_I.gw-1.answers.7Hk2p":            "{inbox}",
	} {
		if got := bus.Template(subject); got != want {
			t.Errorf("Template(%q) = %q, want %q", subject, got, want)
		}
	}
}
