package runner

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
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

// The digest a gateway in this process vouches with is of the schema's JSON
// as the catalog in KV carries it; the runner's is of its session's tool.
// They are the same bytes (key order, HTML escapes), or every vouch would be
// ignored and each call checked twice. A vouch for another schema, or none,
// leaves the check to the runner.
func TestVouchedDigestIsTheCatalogs(t *testing.T) {
	var listed mcp.Tool
	if err := json.Unmarshal([]byte(`{"name":"find","inputSchema":{"type":"object","required":["q"],
		"properties":{"q":{"type":"string","description":"<b>words</b> & more"},"limit":{"type":"integer","maximum":5}}}}`), &listed); err != nil {
		t.Fatal(err)
	}
	r := &Runner{subj: bus.NewSubjects("")}
	stored, err := json.Marshal(model.Catalog{Server: "docs", Tools: []model.Tool{catalogTool(r, "docs", "find", &listed)}})
	if err != nil {
		t.Fatal(err)
	}
	var cat model.Catalog
	if err := json.Unmarshal(stored, &cat); err != nil {
		t.Fatal(err)
	}
	gateway := sha256.Sum256(bytes.TrimSpace(cat.Tools[0].InputSchema))
	var c schemaCache
	if d := c.entry(&listed).digest; d != gateway {
		t.Fatalf("runner digest %x, the catalog's %x (%s)", d, gateway, cat.Tools[0].InputSchema)
	}
	bad := []byte(`{"q":"x","limit":9}`)
	if c.check(&listed, bad, nil) == nil {
		t.Fatal("arguments over the maximum were let through without a vouch")
	}
	other := sha256.Sum256([]byte(`{"type":"object"}`))
	if c.check(&listed, bad, &other) == nil {
		t.Fatal("a vouch for another schema skipped the check")
	}
	if c.check(&listed, bad, &gateway) != nil {
		t.Fatal("a vouch for this schema did not spare the second check")
	}
}
