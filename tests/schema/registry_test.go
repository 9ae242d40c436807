package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"sigs.k8s.io/yaml"
)

const (
	// schemaDir is the repository's schemas/ folder, seen from this package.
	schemaDir = "../../schemas"
	// baseURL is the $id prefix of every schema file.
	baseURL = "https://mcpbus.dev/schemas/"
	// asyncAPIFile is the AsyncAPI document in schemaDir.
	asyncAPIFile = "asyncapi.yaml"
	draft2020    = "https://json-schema.org/draft/2020-12/schema"
)

// registry holds the compiled schemas and counts what real messages exercised.
type registry struct {
	// files are the schema names (file name without .json), sorted.
	files []string
	// docs are the parsed schema files by name.
	docs map[string]any
	// schemas are the compiled schema files by name, plus extra entries for
	// sub-schemas (e.g. "mcp-config#draft").
	schemas map[string]*jsonschema.Schema
	// asyncapi is the parsed AsyncAPI document (YAML turned into JSON values).
	asyncapi map[string]any
	// asyncSchemas are the compiled components/schemas of the AsyncAPI
	// document (the header schemas and the rpc result).
	asyncSchemas map[string]*jsonschema.Schema

	mu        sync.Mutex
	seen      map[string]map[string]int // schema name → source → count
	firstReal map[string][]byte         // schema name → the first real message that matched it
}

// loadRegistry compiles every schema file and the AsyncAPI header schemas;
// any invalid schema fails the test.
func loadRegistry(t testing.TB) *registry {
	t.Helper()
	entries, err := os.ReadDir(schemaDir)
	if err != nil {
		t.Fatal(err)
	}
	r := &registry{docs: map[string]any{}, schemas: map[string]*jsonschema.Schema{},
		asyncSchemas: map[string]*jsonschema.Schema{}, seen: map[string]map[string]int{}, firstReal: map[string][]byte{}}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		name := strings.TrimSuffix(e.Name(), ".json")
		data, err := os.ReadFile(filepath.Join(schemaDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: not JSON: %v", e.Name(), err)
		}
		obj, _ := doc.(map[string]any)
		if got := obj["$schema"]; got != draft2020 {
			t.Errorf("%s: $schema is %v, want %s", e.Name(), got, draft2020)
		}
		if got, want := obj["$id"], baseURL+e.Name(); got != want {
			t.Errorf("%s: $id is %v, want %s", e.Name(), got, want)
		}
		if s, _ := obj["title"].(string); s == "" {
			t.Errorf("%s: no title", e.Name())
		}
		if s, _ := obj["description"].(string); s == "" {
			t.Errorf("%s: no description", e.Name())
		}
		if err := c.AddResource(baseURL+e.Name(), doc); err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		r.files = append(r.files, name)
		r.docs[name] = doc
	}
	sort.Strings(r.files)
	if len(r.files) == 0 {
		t.Fatalf("no schema files in %s", schemaDir)
	}
	for _, name := range r.files {
		sch, err := c.Compile(baseURL + name + ".json")
		if err != nil {
			t.Fatalf("schema %s.json does not compile: %v", name, err)
		}
		r.schemas[name] = sch
	}
	draft, err := c.Compile(baseURL + "mcp-config.json#/$defs/draft")
	if err != nil {
		t.Fatalf("mcp-config.json#/$defs/draft: %v", err)
	}
	r.schemas["mcp-config#draft"] = draft

	r.loadAsyncAPI(t)
	return r
}

// loadAsyncAPI parses asyncapi.yaml and compiles its components/schemas (AsyncAPI
// schemas are a superset of draft-07; ours use only draft-07 keywords).
func (r *registry) loadAsyncAPI(t testing.TB) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(schemaDir, asyncAPIFile))
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatalf("%s is not valid YAML: %v", asyncAPIFile, err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(js))
	if err != nil {
		t.Fatalf("%s: %v", asyncAPIFile, err)
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		t.Fatalf("%s: not a mapping", asyncAPIFile)
	}
	r.asyncapi = obj
	schemas, _ := lookup(obj, "components", "schemas").(map[string]any)
	if len(schemas) == 0 {
		t.Fatalf("%s: no components/schemas", asyncAPIFile)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7)
	c.AssertFormat()
	url := baseURL + asyncAPIFile
	if err := c.AddResource(url, doc); err != nil {
		t.Fatalf("%s: %v", asyncAPIFile, err)
	}
	for name := range schemas {
		sch, err := c.Compile(url + "#/components/schemas/" + name)
		if err != nil {
			t.Fatalf("%s: components/schemas/%s does not compile: %v", asyncAPIFile, name, err)
		}
		r.asyncSchemas[name] = sch
	}
}

// decode reads data as a JSON value for validation.
func decode(data []byte) (any, error) {
	return jsonschema.UnmarshalJSON(bytes.NewReader(data))
}

// validate checks data against the named schema without counting it.
func (r *registry) validate(name string, data []byte) error {
	sch, ok := r.schemas[name]
	if !ok {
		return fmt.Errorf("no schema %q", name)
	}
	v, err := decode(data)
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return sch.Validate(v)
}

// check validates one real message against the named schema, reports a
// mismatch as a test error and counts the schema as exercised by source.
func (r *registry) check(t testing.TB, name, source string, data []byte) bool {
	t.Helper()
	if err := r.validate(name, data); err != nil {
		t.Errorf("%s does not match %s.json: %v\nbody: %s", source, name, err, clip(data))
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen[name] == nil {
		r.seen[name] = map[string]int{}
	}
	r.seen[name][sourceKind(source)]++
	if r.firstReal[name] == nil {
		r.firstReal[name] = append([]byte(nil), data...)
	}
	return true
}

// checkHeaders validates message headers against a header schema of the AsyncAPI document.
func (r *registry) checkHeaders(t testing.TB, schemaName, source string, h map[string][]string) {
	t.Helper()
	sch, ok := r.asyncSchemas[schemaName]
	if !ok {
		t.Fatalf("asyncapi.yaml has no components/schemas/%s", schemaName)
	}
	obj := map[string]any{}
	for k, v := range h {
		if len(v) > 0 {
			obj[k] = v[0]
		}
	}
	if err := sch.Validate(obj); err != nil {
		t.Errorf("%s: headers do not match %s: %v\nheaders: %v", source, schemaName, err, h)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	key := "asyncapi:" + schemaName
	if r.seen[key] == nil {
		r.seen[key] = map[string]int{}
	}
	r.seen[key][sourceKind(source)]++
}

// sourceKind keeps the kind of a source ("bus", "kv", "stream", …) for the summary.
func sourceKind(source string) string {
	kind, _, _ := strings.Cut(source, " ")
	return kind
}

func clip(b []byte) string {
	if len(b) > 2000 {
		return string(b[:2000]) + "…"
	}
	return string(b)
}

// lookup walks a JSON value by object keys.
func lookup(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// pointer resolves a JSON pointer ("/a/b", RFC 6901) in v.
func pointer(v any, ptr string) (any, bool) {
	if ptr == "" {
		return v, true
	}
	if !strings.HasPrefix(ptr, "/") {
		return nil, false
	}
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch x := v.(type) {
		case map[string]any:
			next, ok := x[tok]
			if !ok {
				return nil, false
			}
			v = next
		case []any:
			var i int
			if _, err := fmt.Sscanf(tok, "%d", &i); err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// refs lists every "$ref" value in v with its location.
func refs(v any, at string, out *[][2]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, child := range x {
			if k == "$ref" {
				if s, ok := child.(string); ok {
					*out = append(*out, [2]string{at, s})
				}
				continue
			}
			refs(child, at+"/"+k, out)
		}
	case []any:
		for i, child := range x {
			refs(child, fmt.Sprintf("%s/%d", at, i), out)
		}
	}
}

// addressPattern turns a channel address such as mcp.v1.call.{server}.{tool}
// into a regexp matching the concrete subjects.
func addressPattern(address string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	for address != "" {
		i := strings.IndexByte(address, '{')
		if i < 0 {
			b.WriteString(regexp.QuoteMeta(address))
			break
		}
		j := strings.IndexByte(address[i:], '}')
		if j < 0 {
			b.WriteString(regexp.QuoteMeta(address))
			break
		}
		b.WriteString(regexp.QuoteMeta(address[:i]))
		b.WriteString(`[^.]+`)
		address = address[i+j+1:]
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

// channelAddresses returns the fixed addresses of the AsyncAPI channels by channel id.
func (r *registry) channelAddresses() map[string]string {
	out := map[string]string{}
	channels, _ := r.asyncapi["channels"].(map[string]any)
	for id, ch := range channels {
		if a, ok := lookup(ch, "address").(string); ok {
			out[id] = a
		}
	}
	return out
}

// channelFor returns the id of the channel whose address matches subject, or "".
func (r *registry) channelFor(subject string) string {
	for id, a := range r.channelAddresses() {
		if addressPattern(a).MatchString(subject) {
			return id
		}
	}
	return ""
}

// modelDoc is a Go value and the schema it must match.
type modelDoc struct {
	schema string
	v      any
}

// checkModelDocs checks each Go value, as it marshals, against its schema,
// and that the schema rejects it with an unknown member added (closed, as
// the schemas of real messages are: checkClosed). It returns the schemas
// it checked.
func checkModelDocs(t *testing.T, r *registry, docs []modelDoc) map[string]bool {
	t.Helper()
	seen := map[string]bool{}
	for _, d := range docs {
		data := mustJSON(t, d.v)
		if err := r.validate(d.schema, data); err != nil {
			t.Errorf("%s does not accept %s: %v", d.schema, data, err)
		}
		seen[d.schema] = true
		var obj map[string]any
		if err := json.Unmarshal(data, &obj); err != nil {
			t.Fatal(err)
		}
		obj["x_unknown_member"] = true
		if r.validate(d.schema, mustJSON(t, obj)) == nil {
			t.Errorf("%s accepts an unknown member", d.schema)
		}
	}
	return seen
}

// mustJSON marshals v or fails.
func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
