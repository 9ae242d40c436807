package mcpserver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/pattern"
	"github.com/mcpbus/mcpbus/libs/schemaguard"
)

// Keys of the _meta the aggregate adds to tools, prompts and resources, so a
// client can tell which server and original name hide behind a namespaced one.
const (
	MetaServer   = "mcpbus/server"
	MetaTool     = "mcpbus/tool"
	MetaPrompt   = "mcpbus/prompt"
	MetaResource = "mcpbus/uri"
	MetaName     = "mcpbus/name"
)

var exposedName = pattern.MustCompile(`^[a-zA-Z0-9_-]+$`, 1, 64)

// toolEntry is one tool of the aggregate: built once per catalog version and
// shared, read-only, by the MCP server of every principal that may see it.
type toolEntry struct {
	name string // the name clients see (names: and the server's)
	cat  model.Tool
	tool *mcp.Tool
	raw  []byte // the catalog entry as stored, to spot changes cheaply
	// unservable is set (under Aggregator.mu) when go-sdk refused the tool.
	unservable bool

	schemaOnce sync.Once
	schema     *schemaguard.Schema // nil: the schema cannot be compiled, the server validates
	digest     [sha256.Size]byte   // of the schema's JSON, for bus.VouchArguments
}

// names are the names filters and rules match e by: the one clients see,
// and <server>__<tool> as the server names it when that differs.
func (e *toolEntry) names() []string { return model.ToolNames(e.name, e.cat.Server, e.cat.Tool) }

// resolved compiles the input schema on first use: a catalog of thousands of
// tools costs nothing until they are called.
func (e *toolEntry) resolved() *schemaguard.Schema {
	e.schemaOnce.Do(func() {
		raw, _ := e.tool.InputSchema.(json.RawMessage)
		// A schema that would send the validator into endless (fatal) or
		// exponential recursion is left to the server (schemaguard).
		if r, err := schemaguard.Resolve(raw); err == nil {
			e.schema, e.digest = r, sha256.Sum256(raw)
		}
	})
	return e.schema
}

// vouch tells a runner in this process that a call's arguments, which
// checkArguments let through, fit e's input schema: it need not check them
// against the same schema again (its own check stays for every other
// caller, and for a schema that differs from the one checked here).
func (e *toolEntry) vouch(ctx context.Context) context.Context {
	if e.resolved() == nil {
		return ctx
	}
	return bus.VouchArguments(ctx, e.digest)
}

// paramHeaders reports whether the tool's input schema binds arguments to
// Mcp-Param-* headers (x-mcp-header), which go-sdk checks on requests of
// 2026-07-28.
func (e *toolEntry) paramHeaders() bool {
	raw, _ := e.tool.InputSchema.(json.RawMessage)
	return bytes.Contains(raw, []byte(`"x-mcp-header"`))
}

// buildTool turns a catalog entry into the go-sdk tool served under name. An
// entry whose input schema is not a JSON object of type "object" (MCP requires
// one) is refused, so one bad server cannot break the aggregate.
func buildTool(name string, t model.Tool) (*mcp.Tool, error) {
	schema := bytes.TrimSpace(t.InputSchema)
	if len(schema) == 0 || bytes.Equal(schema, []byte("null")) {
		schema = []byte(`{"type":"object"}`)
	}
	var m map[string]any
	if err := json.Unmarshal(schema, &m); err != nil || m == nil {
		return nil, errors.New("input schema is not a JSON object")
	}
	switch typ := m["type"]; typ {
	case "object":
	case nil: // a schema without a type accepts objects too; say so explicitly
		m["type"] = "object"
		schema, _ = json.Marshal(m)
	default:
		return nil, fmt.Errorf("input schema has type %v, not object", typ)
	}
	out := &mcp.Tool{
		Name: name, Title: t.Title, Description: t.Description,
		InputSchema: json.RawMessage(schema),
		Meta:        mcp.Meta{MetaServer: t.Server, MetaTool: t.Tool},
	}
	if o := bytes.TrimSpace(t.OutputSchema); len(o) > 0 && !bytes.Equal(o, []byte("null")) {
		if !json.Valid(o) {
			return nil, errors.New("output schema is not JSON")
		}
		out.OutputSchema = json.RawMessage(o)
	}
	if a := bytes.TrimSpace(t.Annotations); len(a) > 0 && !bytes.Equal(a, []byte("null")) {
		var ann mcp.ToolAnnotations
		if json.Unmarshal(a, &ann) == nil {
			out.Annotations = &ann
		}
	}
	return out, nil
}

// deriveTools computes the aggregate's tool set from the catalogs, reusing
// the entries of prev that did not change. Entries that cannot be served are
// reported through skip.
func deriveTools(catalogs map[string]model.Catalog, prev map[string]*toolEntry, skip func(model.Tool, error)) map[string]*toolEntry {
	type cand struct {
		base string
		t    model.Tool
	}
	var all []cand
	count := map[string]int{}
	for _, slug := range sortedKeys(catalogs) {
		for _, t := range catalogs[slug].Tools {
			if t.Server == "" {
				t.Server = slug
			}
			if t.Server != slug || t.Tool == "" {
				skip(t, errors.New("catalog entry names another server or no tool"))
				continue
			}
			base := t.Name
			if !exposedName.MatchString(base) {
				base = model.NamespacedName(t.Server, t.Tool)
			}
			all = append(all, cand{base, t})
			count[base]++
		}
	}
	out := make(map[string]*toolEntry, len(all))
	for _, c := range all {
		name := c.base
		if count[name] > 1 {
			name = model.ClashName(c.base, c.t.Server, c.t.Tool)
		}
		if _, dup := out[name]; dup { // the same tool twice in one catalog
			skip(c.t, errors.New("duplicate tool"))
			continue
		}
		raw, _ := json.Marshal(c.t)
		if old, ok := prev[name]; ok && bytes.Equal(old.raw, raw) {
			out[name] = old
			continue
		}
		tool, err := buildTool(name, c.t)
		if err != nil {
			skip(c.t, err)
			continue
		}
		out[name] = &toolEntry{name: name, cat: c.t, tool: tool, raw: raw}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
