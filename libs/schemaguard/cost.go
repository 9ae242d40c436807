package schemaguard

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"

	"github.com/google/jsonschema-go/jsonschema"
)

// A schema Check lets through can still cost without bound per value: the
// validator compares a value with every entry of an enum (some 640 ns each),
// tries every branch of an anyOf, and quotes the value in every failure, so
// an output schema of 20 KiB (an enum of 10,000 numbers) and a result of
// 2 KiB (1,000 array items) took 6.4 s of a core, and ten times both an
// hour: a server holds the runner's CPU (every server on it) with calls of
// its own tool, as the schema and the structuredContent are both its own.
// So before a value is validated the cost of validating it is bounded from
// above, by walking the schema over the value as the validator does
// (counting subschema visits, enum and const entries, and the size of the
// value quoted in a failure) and stopping at MaxCost: a value past it is not
// validated (ErrCostly).

// MaxCost bounds the work one Validate may do, in units of about 50 ns of
// the validator's work (one value quoted in an error): about half a second
// of a core.
const MaxCost = 1 << 23

// Units of the validator's work, measured on jsonschema-go v0.4.3: a
// subschema visit (with its failure's error) costs some 1.4 µs, an enum
// entry compared some 640 ns, and quoting a value some 50 ns a node.
const (
	costVisit = 25
	costEntry = 12
	costNode  = 1
)

// ErrCostly marks a value that Validate did not check because checking it
// against the schema would cost more than MaxCost (errors.Is).
var ErrCostly = errors.New("too costly to check against its schema")

// Schema is a schema Check let through, compiled.
type Schema struct {
	rs *jsonschema.Resolved
	g  *graph
}

// Validate checks v (as encoding/json decodes into any) against the schema,
// unless that would cost more than MaxCost: then the error is ErrCostly and
// v is not checked (the caller decides what an unchecked value means).
func (s *Schema) Validate(v any) error {
	if !s.cheap(v) && s.cost(v, MaxCost) > MaxCost {
		return fmt.Errorf("%w: checking it would cost more than mcpbus spends on one value", ErrCostly)
	}
	return s.rs.Validate(v)
}

// cheap reports whether validating v is within MaxCost by a quick bound:
// each subschema (refs inlined) visits each value at most once, quoting at
// most all of v and comparing all of its entries. Most calls pass here
// without the walk below.
func (s *Schema) cheap(v any) bool {
	n := count(v)
	if n > 1<<16 {
		return false
	}
	return int64(s.g.inlined)*n*(costVisit+costNode*n+s.g.maxEntries) <= MaxCost
}

// cost is an upper bound of what validating v costs, in the units above;
// past limit it stops counting (the result is then above limit).
func (s *Schema) cost(v any, limit int64) int64 {
	w := &costWalk{limit: limit, sizes: map[uintptr]int64{}}
	w.visit(s.g.nodes[""], v)
	return w.spent
}

// applied is what of a subschema applies to which part of a value, as the
// validator applies it (conservatively: every schema for members or items
// counts for each of them).
type applied struct {
	object  bool             // a schema object, not true or false
	entries int64            // the cost of its enum and const entries
	same    []*node          // applied to the value itself ($ref, allOf, not, if, dependentSchemas, …)
	props   map[string]*node // properties, by name
	members []*node          // patternProperties, additionalProperties, unevaluatedProperties
	names   *node            // propertyNames
	prefix  []*node          // prefixItems (draft 7: items as an array)
	items   []*node          // items, additionalItems, contains, unevaluatedItems
}

// link fills n's applied from m, the subschema at ptr, whose subschemas
// walk has recorded.
func (g *graph) link(n *node, m map[string]any, ptr string) {
	at := func(rel string) *node { return g.nodes[ptr+"/"+rel] }
	add := func(list []*node, c *node) []*node {
		if c != nil {
			list = append(list, c)
		}
		return list
	}
	n.object = true
	if e, ok := m["enum"].([]any); ok {
		for _, x := range e {
			n.entries += costEntry + costNode*count(x)
		}
	}
	if c, ok := m["const"]; ok {
		n.entries += costEntry + costNode*count(c)
	}
	for _, k := range []string{"not", "if", "then", "else"} {
		n.same = add(n.same, at(k))
	}
	for _, k := range []string{"allOf", "anyOf", "oneOf"} {
		if a, ok := m[k].([]any); ok {
			for i := range a {
				n.same = add(n.same, at(k+"/"+strconv.Itoa(i)))
			}
		}
	}
	for _, k := range []string{"dependentSchemas", "dependencies"} {
		if o, ok := m[k].(map[string]any); ok {
			for name := range o {
				n.same = add(n.same, at(k+"/"+escape(name)))
			}
		}
	}
	if o, ok := m["properties"].(map[string]any); ok {
		n.props = make(map[string]*node, len(o))
		for name := range o {
			if c := at("properties/" + escape(name)); c != nil {
				n.props[name] = c
			}
		}
	}
	if o, ok := m["patternProperties"].(map[string]any); ok {
		for p := range o {
			n.members = add(n.members, at("patternProperties/"+escape(p)))
		}
	}
	for _, k := range []string{"additionalProperties", "unevaluatedProperties"} {
		n.members = add(n.members, at(k))
	}
	n.names = at("propertyNames")
	prefix := "prefixItems"
	if _, ok := m["items"].([]any); ok {
		prefix = "items" // draft 7's positional items
	}
	if a, ok := m[prefix].([]any); ok {
		for i := range a {
			n.prefix = add(n.prefix, at(prefix+"/"+strconv.Itoa(i)))
		}
	}
	for _, k := range []string{"items", "additionalItems", "contains", "unevaluatedItems"} {
		n.items = add(n.items, at(k))
	}
}

type costWalk struct {
	spent, limit int64
	sizes        map[uintptr]int64 // of the containers measured, by identity
}

func (w *costWalk) over() bool { return w.spent > w.limit }

// visit counts n applied to v. It ends: Check refused schemas whose refs
// loop, so each step follows a finite schema or descends into v.
func (w *costWalk) visit(n *node, v any) {
	if n == nil || w.over() {
		return
	}
	w.spent += costVisit
	if !n.object {
		return // true or false
	}
	w.spent += costNode*w.size(v) + n.entries // a failure quotes the value
	for _, c := range n.same {
		w.visit(c, v)
	}
	switch v := v.(type) {
	case map[string]any:
		for name, x := range v {
			w.visit(n.props[name], x)
			for _, c := range n.members {
				w.visit(c, x)
			}
			w.visit(n.names, name)
			if w.over() {
				return
			}
		}
	case []any:
		for i, x := range v {
			if i < len(n.prefix) {
				w.visit(n.prefix[i], x)
			}
			for _, c := range n.items {
				w.visit(c, x)
			}
			if w.over() {
				return
			}
		}
	}
}

// size is the number of values in v (itself and those inside it), counted
// once per container.
func (w *costWalk) size(v any) int64 {
	var key uintptr
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 0 {
			return 1
		}
		key = uintptr(reflect.ValueOf(x).UnsafePointer())
	case []any:
		if len(x) == 0 {
			return 1
		}
		key = uintptr(reflect.ValueOf(x).UnsafePointer())
	default:
		return 1
	}
	if n, ok := w.sizes[key]; ok {
		return n
	}
	n := count(v)
	w.sizes[key] = n
	return n
}

// count is the number of values in v.
func count(v any) int64 {
	n := int64(1)
	switch x := v.(type) {
	case map[string]any:
		for _, c := range x {
			n += count(c)
		}
	case []any:
		for _, c := range x {
			n += count(c)
		}
	}
	return n
}
