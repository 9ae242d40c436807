package model_test

import (
	"testing"

	"github.com/mcpbus/mcpbus/libs/model"
)

func TestResourceCovers(t *testing.T) {
	for _, c := range []struct {
		resource, target string
		want             bool
	}{
		{"", "https://anywhere.example/mcp", true}, // unknown: as before
		{"https://mcp.example.com/mcp", "https://mcp.example.com/mcp", true},
		{"https://mcp.example.com", "https://mcp.example.com/mcp", true},
		{"https://mcp.example.com/", "https://mcp.example.com/mcp", true},
		{"https://MCP.example.com:443/mcp", "https://mcp.example.com/mcp/", true},
		{"https://mcp.example.com/mcp", "https://mcp.example.com/mcp?x=1", true},
		{"https://mcp.example.com/mcp", "https://evil.example/mcp", false},
		{"https://mcp.example.com/mcp", "http://mcp.example.com/mcp", false},
		{"https://mcp.example.com/mcp", "https://mcp.example.com:8443/mcp", false},
		{"https://mcp.example.com/mcp", "https://mcp.example.com/mcpx", false},
		{"https://mcp.example.com/mcp", "https://mcp.example.com/other", false},
		{"https://mcp.example.com/mcp", "https://mcp.example.com.evil.example/mcp", false},
		{"not a url", "https://mcp.example.com/mcp", false},
	} {
		if got := model.ResourceCovers(c.resource, c.target); got != c.want {
			t.Errorf("ResourceCovers(%q, %q) = %v, want %v", c.resource, c.target, got, c.want)
		}
	}
}
