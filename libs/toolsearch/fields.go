package toolsearch

import (
	"cmp"
	"encoding/json"
	"sort"
	"strconv"

	"github.com/mcpbus/mcpbus/libs/model"
)

// terms are the weighted term frequencies of t and its weighted length.
func terms(t *model.Tool) (map[string]float64, float64) {
	tf := map[string]float64{}
	var length float64
	add := func(text string, w float64) {
		for _, term := range Tokens(text) {
			tf[term] += w
			length += w
		}
	}
	add(cmp.Or(t.Tool, t.Name), weightName)
	add(t.Server, weightServer)
	add(t.Title, weightTitle)
	add(t.Description, weightDesc)
	for _, p := range params(t.InputSchema) {
		add(p, weightParam)
	}
	return tf, length
}

// params are the names and descriptions of a tool's parameters (the
// properties of its input schema, and one level of nested object or array
// items), in a stable order.
func params(schema json.RawMessage) []string {
	if len(schema) == 0 {
		return nil
	}
	var s propSchema
	if json.Unmarshal(schema, &s) != nil {
		return nil
	}
	var out []string
	s.collect(&out, 2)
	return out
}

type propSchema struct {
	Description string                `json:"description"`
	Properties  map[string]propSchema `json:"properties"`
	Items       *propSchema           `json:"items"`
}

func (s propSchema) collect(out *[]string, depth int) {
	if depth == 0 {
		return
	}
	names := make([]string, 0, len(s.Properties))
	for name := range s.Properties {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		p := s.Properties[name]
		*out = append(*out, name, p.Description)
		p.collect(out, depth-1)
		if p.Items != nil {
			p.Items.collect(out, depth-1)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
