package runner

import (
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Tools whose schema binds an argument to a header (SEP-2243) are told
// apart, at any depth, so that raw HTTP calls leave them to go-sdk.
func TestSchemaBindsHeaders(t *testing.T) {
	var c schemaCache
	plain := &mcp.Tool{Name: "plain", InputSchema: map[string]any{"type": "object",
		"properties": map[string]any{"region": map[string]any{"type": "string"}}}}
	bound := &mcp.Tool{Name: "bound", InputSchema: map[string]any{"type": "object",
		"properties": map[string]any{"opts": map[string]any{"type": "object",
			"properties": map[string]any{"region": map[string]any{"type": "string", "x-mcp-header": "Region"}}}}}}
	if c.bindsHeaders(plain) || !c.bindsHeaders(bound) || !c.bindsHeaders(bound) {
		t.Fatalf("plain %v, bound %v", c.bindsHeaders(plain), c.bindsHeaders(bound))
	}
	if c.resolved(plain) == nil {
		t.Fatal("the plain schema no longer compiles")
	}
}
