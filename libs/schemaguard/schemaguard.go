// Package schemaguard decides whether a JSON Schema an MCP server sent (a
// tool's input schema) is safe to validate with github.com/google/jsonschema-go.
//
// That validator follows $ref with no bound of its own: a schema whose refs
// lead back to where they started without descending into the instance
// ({"$ref":"#"}, or allOf pointing at itself) recurses until Go's stack
// overflows, a fatal error no recover catches, so one server's tool would end
// the runner (every server on it) or the gateway at its first call. Refs that
// fan out (each $defs entry naming the next one twice) make a schema of a few
// lines cost 2^n checks per value. MCP servers are someone else's code, so
// such a schema is not validated by mcpbus at all: the server checks its own
// arguments, as it does for any schema mcpbus cannot compile.
//
// The rule is conservative and simple to state: the schema, with every $ref
// replaced by what it names, must be finite (no cycle, so recursive schemas
// are left to the server too) and hold at most MaxSubschemas subschemas. Refs
// must be local ("#", "#/json/pointer", "#anchor") in a schema without
// embedded resources ($id below the root); $dynamicRef and $recursiveRef are
// not followed here, so a schema using them is refused too.
//
// Recursive schemas (JSON values, trees) are common, and one whose every
// cycle descends into the instance does terminate, but its cost is not
// the schema's: the validator evaluates every anyOf/oneOf branch and
// quotes the value in each failure, so a cycle reached by two paths per
// level costs 2^depth, and even one path costs the instance's depth times
// its size in error text. A sound bound needs, per property name and array
// position, how many paths lead from a node back to it in one level (a
// binary tree's left and right are one each; anyOf of two copies is two)
// and a check of each instance's depth before every Validate by every
// caller. That is not done: such a schema stays the server's to check.
package schemaguard

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
)

// MaxSubschemas bounds the subschemas of a schema with its refs inlined:
// the most schema nodes one value of the arguments is checked against.
const MaxSubschemas = 10000

// ErrUnsafe marks a schema this package refuses (errors.Is).
var ErrUnsafe = errors.New("schema not validated by mcpbus")

// Resolve compiles raw after Check; the error says why it is not checked
// here (ErrUnsafe, or the library's own refusal).
func Resolve(raw []byte) (*Schema, error) {
	g, err := check(raw)
	if err != nil {
		return nil, err
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		return nil, err
	}
	return &Schema{rs: rs, g: g}, nil
}

// Check reports why raw is not safe to validate (ErrUnsafe), nil when it is.
func Check(raw []byte) error {
	_, err := check(raw)
	return err
}

func check(raw []byte) (*graph, error) {
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	g := &graph{nodes: map[string]*node{}, anchors: map[string]string{}}
	if err := g.walk(doc, "", true); err != nil {
		return nil, err
	}
	for _, n := range g.nodes {
		if n.ref == "" {
			continue
		}
		target, err := g.target(n.ref)
		if err != nil {
			return nil, err
		}
		n.kids = append(n.kids, target)
		n.same = append(n.same, g.nodes[target])
	}
	size := map[string]int{}
	onPath := map[string]bool{}
	inlined, err := g.count("", size, onPath)
	if err != nil {
		return nil, err
	}
	g.inlined = inlined
	for _, n := range g.nodes {
		g.maxEntries = max(g.maxEntries, n.entries)
	}
	return g, nil
}

// node is one subschema, by its JSON pointer from the root.
type node struct {
	kids []string // pointers of its subschemas, and of what its $ref names
	ref  string
	// What cost.go needs to walk the node over a value as the validator
	// does (applied, filled by walk).
	applied
}

type graph struct {
	nodes   map[string]*node
	anchors map[string]string // "#name" → pointer
	// inlined is the number of subschemas with refs inlined, maxEntries
	// the most a node's enum and const cost (cost.go's quick bound).
	inlined    int
	maxEntries int64
}

// Keywords whose value is one subschema, an array of them, or an object of
// them (drafts 7 and 2020-12).
var (
	oneSchema = []string{"additionalProperties", "additionalItems", "items", "contains", "propertyNames", "not",
		"if", "then", "else", "unevaluatedItems", "unevaluatedProperties", "contentSchema"}
	schemaArray = []string{"allOf", "anyOf", "oneOf", "prefixItems", "items"}
	schemaMap   = []string{"properties", "patternProperties", "dependentSchemas", "$defs", "definitions", "dependencies"}
)

// walk records v, the subschema at ptr, and those under it.
func (g *graph) walk(v any, ptr string, root bool) error {
	if len(g.nodes) >= MaxSubschemas {
		return fmt.Errorf("%w: more than %d subschemas", ErrUnsafe, MaxSubschemas)
	}
	n := &node{}
	g.nodes[ptr] = n
	m, ok := v.(map[string]any)
	if !ok {
		return nil // true, false (or something the library will refuse)
	}
	for _, k := range []string{"$dynamicRef", "$recursiveRef"} {
		if _, ok := m[k]; ok {
			return fmt.Errorf("%w: %s at %q is not followed here", ErrUnsafe, k, "#"+ptr)
		}
	}
	// ("id", draft 4's, is no keyword to the validator: refs ignore it.)
	if id, ok := m["$id"].(string); ok && !root {
		if !strings.HasPrefix(id, "#") {
			return fmt.Errorf("%w: an embedded resource ($id %q at %q)", ErrUnsafe, id, "#"+ptr)
		}
		g.anchors[id] = ptr // a draft-07 anchor
	}
	if a, ok := m["$anchor"].(string); ok {
		g.anchors["#"+a] = ptr
	}
	if r, ok := m["$ref"]; ok {
		s, ok := r.(string)
		if !ok {
			return fmt.Errorf("%w: $ref at %q is not a string", ErrUnsafe, "#"+ptr)
		}
		n.ref = s
	}
	child := func(v any, p string) error {
		n.kids = append(n.kids, p)
		return g.walk(v, p, false)
	}
	for _, k := range oneSchema {
		if v, ok := m[k]; ok {
			if _, isArray := v.([]any); !isArray {
				if err := child(v, ptr+"/"+escape(k)); err != nil {
					return err
				}
			}
		}
	}
	for _, k := range schemaArray {
		if a, ok := m[k].([]any); ok {
			for i, v := range a {
				if err := child(v, ptr+"/"+escape(k)+"/"+strconv.Itoa(i)); err != nil {
					return err
				}
			}
		}
	}
	for _, k := range schemaMap {
		if o, ok := m[k].(map[string]any); ok {
			for name, v := range o {
				if _, isArray := v.([]any); isArray {
					continue // draft-07 dependencies: property names
				}
				if err := child(v, ptr+"/"+escape(k)+"/"+escape(name)); err != nil {
					return err
				}
			}
		}
	}
	g.link(n, m, ptr)
	return nil
}

// target is the pointer of the subschema ref names.
func (g *graph) target(ref string) (string, error) {
	if p, ok := g.anchors[ref]; ok {
		return p, nil
	}
	frag, ok := strings.CutPrefix(ref, "#")
	if !ok {
		return "", fmt.Errorf("%w: $ref %q is not local", ErrUnsafe, ref)
	}
	frag, err := url.PathUnescape(frag)
	if err != nil || frag != "" && !strings.HasPrefix(frag, "/") {
		return "", fmt.Errorf("%w: $ref %q names no subschema", ErrUnsafe, ref)
	}
	// The pointer's tokens, in the canonical spelling walk used.
	ptr := ""
	if frag != "" {
		for _, tok := range strings.Split(frag[1:], "/") {
			ptr += "/" + escape(unescaper.Replace(tok))
		}
	}
	if _, ok := g.nodes[ptr]; !ok {
		return "", fmt.Errorf("%w: $ref %q names no subschema", ErrUnsafe, ref)
	}
	return ptr, nil
}

// count is the number of subschemas under ptr with refs inlined (memoized
// in size), failing on a cycle or past MaxSubschemas.
func (g *graph) count(ptr string, size map[string]int, onPath map[string]bool) (int, error) {
	if n, ok := size[ptr]; ok {
		return n, nil
	}
	if onPath[ptr] {
		return 0, fmt.Errorf("%w: its $ref at %q leads back to itself (a recursive schema)", ErrUnsafe, "#"+ptr)
	}
	onPath[ptr] = true
	total := 1
	for _, k := range g.nodes[ptr].kids {
		n, err := g.count(k, size, onPath)
		if err != nil {
			return 0, err
		}
		if total += n; total > MaxSubschemas {
			return 0, fmt.Errorf("%w: with its $refs followed it has more than %d subschemas", ErrUnsafe, MaxSubschemas)
		}
	}
	delete(onPath, ptr)
	size[ptr] = total
	return total, nil
}

var (
	escaper   = strings.NewReplacer("~", "~0", "/", "~1")
	unescaper = strings.NewReplacer("~1", "/", "~0", "~")
)

// escape spells a pointer token as RFC 6901 does.
func escape(tok string) string {
	if !strings.ContainsAny(tok, "~/") {
		return tok
	}
	return escaper.Replace(tok)
}
