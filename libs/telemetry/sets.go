package telemetry

import (
	"context"
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/mcpbus/mcpbus/libs/telemetry/conv"
)

// Histogram is a histogram whose samples' attribute sets are made once per
// distinct list of attributes: metric.WithAttributes sorts, deduplicates
// and hashes its list on every sample (~4 µs and 3 allocations a sample
// of six attributes, more than the sample's own recording), and the
// lists a process records with are few (an operation, a server, a tool,
// an outcome). The zero Histogram records nothing.
type Histogram struct {
	h    metric.Float64Histogram
	sets *sets
}

// NewHistogram wraps h; bounds cap the distinct values of the attributes
// they name (see Bound).
func NewHistogram(h metric.Float64Histogram, bounds ...Bound) Histogram {
	s := &sets{m: map[string]metric.MeasurementOption{}, bounds: bounds,
		seen: make([]map[string]map[string]struct{}, len(bounds)), kept: make([]int, len(bounds))}
	for i := range bounds {
		s.seen[i] = map[string]map[string]struct{}{}
	}
	return Histogram{h: h, sets: s}
}

// Other is the value an attribute bounded by a Bound takes past its bound,
// and the value callers give a name that names nothing (an unknown tool):
// the conventions' spelling for "none of the known values" (as
// http.request.method does).
const Other = "_OTHER"

// Bound caps the distinct values one attribute of a histogram's samples
// takes, per scope: the first Max values seen in a scope are kept, any
// later one is recorded as Other. Some values are not mcpbus's to choose:
// an MCP server names its tools (5,000 of them, or a new name a minute), a
// client names the prompt it asks for. The SDK keeps at most 2000 series a
// metric and folds the rest into one overflow series for every label: with
// no bound, one server renaming its tools, or one client sending random
// names, would fill that and blind the metric for everyone; with a bound
// per server, it blinds only its own values, and each series costs the
// Prometheus behind it ~20 series (a histogram's buckets).
type Bound struct {
	Key attribute.Key
	// Max is the number of distinct values kept per scope.
	Max int
	// Scope is the scope a sample's value counts in (the server a tool
	// belongs to); nil: the histogram is one scope. Scopes themselves are
	// bounded (maxScopes): past it, a new scope's values are Other.
	Scope func(value string, attrs []attribute.KeyValue) string
}

// ScopeBy is the Scope of values counted apart for each value of key (a
// server's tools apart from another's): the value of key in the sample, ""
// without one.
func ScopeBy(key attribute.Key) func(string, []attribute.KeyValue) string {
	return func(_ string, attrs []attribute.KeyValue) string {
		for _, kv := range attrs {
			if kv.Key == key {
				return kv.Value.String()
			}
		}
		return ""
	}
}

// ScopeByPrefix is the Scope of namespaced names ("server__tool"): the part
// before sep, "" for a name without it.
func ScopeByPrefix(sep string) func(string, []attribute.KeyValue) string {
	return func(v string, _ []attribute.KeyValue) string {
		prefix, _, _ := strings.Cut(v, sep)
		return prefix
	}
}

// maxScopes bounds the scopes of one Bound, and maxValues the values it
// keeps in all (the SDK keeps no more series a metric): at most 2000
// strings of MaxLabelLen bytes, whatever the scopes.
const (
	maxScopes = 256
	maxValues = 2000
)

// Record records v with attrs, each string value bounded (boundLabels).
func (h Histogram) Record(ctx context.Context, v float64, attrs []attribute.KeyValue) {
	if h.h == nil {
		return
	}
	h.h.Record(ctx, v, h.sets.option(boundLabels(attrs)))
}

// MaxLabelLen bounds a string attribute of a metric sample, in bytes. Some
// are a client's words (the name of a tool that does not exist); the SDK
// bounds a metric's series (2000), not their values, and every series, and
// every entry of sets, keeps its strings: unbounded, 2000 names of 1 MiB.
const MaxLabelLen = 256

// boundLabels is attrs with every string value over MaxLabelLen cut (at a
// character boundary, "…" marking the cut); attrs itself when none is.
func boundLabels(attrs []attribute.KeyValue) []attribute.KeyValue {
	var out []attribute.KeyValue
	for i, kv := range attrs {
		if kv.Value.Type() != attribute.STRING || len(kv.Value.AsString()) <= MaxLabelLen {
			continue
		}
		if out == nil {
			out = slices.Clone(attrs)
		}
		s := kv.Value.AsString()
		cut := MaxLabelLen - len("…")
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		out[i] = kv.Key.String(s[:cut] + "…")
	}
	if out == nil {
		return attrs
	}
	return out
}

// maxSets bounds the sets kept: past it (attributes of unbounded
// cardinality), a sample makes its set as metric.WithAttributes does.
const maxSets = 4096

// sets keeps the record option of each attribute list by a key that
// spells the list out: its keys and values, each prefixed by its length,
// so no two lists share a key whatever their strings hold.
type sets struct {
	mu sync.RWMutex
	m  map[string]metric.MeasurementOption
	// bounds, and the values of each seen so far by scope (under mu).
	bounds []Bound
	seen   []map[string]map[string]struct{}
	kept   []int // values in seen[i], all scopes
}

func (s *sets) option(attrs []attribute.KeyValue) metric.MeasurementOption {
	var buf [256]byte
	key := appendKey(buf[:0], attrs)
	s.mu.RLock()
	o, ok := s.m[string(key)] // no allocation for the lookup
	s.mu.RUnlock()
	if ok {
		return o
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if o, ok := s.m[string(key)]; ok {
		return o
	}
	// A list kept in m keeps the values bound gave it: a value is Other
	// or not for good, as its series is.
	o = metric.WithAttributeSet(attribute.NewSet(s.bound(attrs)...))
	if len(s.m) < maxSets {
		s.m[string(key)] = o
	}
	return o
}

// bound is attrs with each value past its Bound replaced by Other; attrs
// itself when none is. Under mu.
func (s *sets) bound(attrs []attribute.KeyValue) []attribute.KeyValue {
	out, cloned := attrs, false
	for i, b := range s.bounds {
		for j, kv := range attrs {
			if kv.Key != b.Key || kv.Value.Type() != attribute.STRING {
				continue
			}
			v := kv.Value.AsString()
			if v == Other || s.admit(i, b, v, attrs) {
				continue
			}
			if !cloned {
				out, cloned = slices.Clone(attrs), true
			}
			out[j] = kv.Key.String(Other)
		}
	}
	return out
}

// admit reports whether v is one of the values bound i keeps, making it
// one while its scope has room. Under mu.
func (s *sets) admit(i int, b Bound, v string, attrs []attribute.KeyValue) bool {
	scope := ""
	if b.Scope != nil {
		scope = b.Scope(v, attrs)
	}
	values, ok := s.seen[i][scope]
	if !ok {
		if len(s.seen[i]) >= maxScopes {
			return false
		}
		values = map[string]struct{}{}
		s.seen[i][scope] = values
	}
	if _, ok := values[v]; ok {
		return true
	}
	if len(values) >= b.Max || s.kept[i] >= maxValues {
		return false
	}
	values[v] = struct{}{}
	s.kept[i]++
	return true
}

// appendKey appends to b the key of attrs.
func appendKey(b []byte, attrs []attribute.KeyValue) []byte {
	str := func(b []byte, s string) []byte {
		return append(binary.AppendUvarint(b, uint64(len(s))), s...)
	}
	for _, kv := range attrs {
		b = str(b, string(kv.Key))
		t := kv.Value.Type()
		b = append(b, byte(t))
		switch t {
		case attribute.STRING:
			b = str(b, kv.Value.AsString())
		case attribute.INT64:
			b = binary.AppendVarint(b, kv.Value.AsInt64())
		case attribute.FLOAT64:
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(kv.Value.AsFloat64()))
		case attribute.BOOL:
			if kv.Value.AsBool() {
				b = append(b, 1)
			} else {
				b = append(b, 0)
			}
		default: // slices: their JSON
			b = str(b, kv.Value.String())
		}
	}
	return b
}

// The bounds of the MCP operation histograms (mcp.client.operation.duration,
// mcp.server.operation.duration): a server lists its own tools (a large one
// ~200) and prompts; error.type is a code of the contract or a JSON-RPC
// code, some dozens.
const (
	MaxToolNames   = 256 // gen_ai.tool.name values per server
	MaxPromptNames = 64  // gen_ai.prompt.name values per server
	MaxErrorTypes  = 64  // error.type values per histogram
)

// MCPBounds are the Bounds of an MCP operation histogram, its tool and
// prompt names counted per server by scope.
func MCPBounds(scope func(string, []attribute.KeyValue) string) []Bound {
	return []Bound{
		{Key: conv.GenAIToolName, Max: MaxToolNames, Scope: scope},
		{Key: conv.GenAIPromptName, Max: MaxPromptNames, Scope: scope},
		{Key: conv.ErrorType, Max: MaxErrorTypes},
	}
}
