package schemaguard

import (
	"encoding/json"
	"fmt"
)

// CheckForm reports why raw, an elicitation's requested schema, is not
// safe to validate an answer against (ErrUnsafe). MCP limits that schema to
// an object of primitive properties, which never needs a reference, and a
// reference there is read differently by each reader (go-sdk resolves the
// whole schema, libs/elicitform each property alone, where "#" is the
// property itself), so any $ref, $dynamicRef or $recursiveRef is refused.
func CheckForm(raw []byte) error {
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	if k := refKey(doc); k != "" {
		return fmt.Errorf("%w: a requested schema with %s (a form's properties are plain values)", ErrUnsafe, k)
	}
	return Check(raw)
}

// refKey is the first reference keyword found anywhere in v, or "".
func refKey(v any) string {
	switch v := v.(type) {
	case map[string]any:
		for k, c := range v {
			if k == "$ref" || k == "$dynamicRef" || k == "$recursiveRef" {
				return k
			}
			if r := refKey(c); r != "" {
				return r
			}
		}
	case []any:
		for _, c := range v {
			if r := refKey(c); r != "" {
				return r
			}
		}
	}
	return ""
}
