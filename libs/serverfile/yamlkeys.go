package serverfile

import (
	"bytes"
	"fmt"
	"strconv"

	yamlv2 "go.yaml.in/yaml/v2"
	yamlv3 "go.yaml.in/yaml/v3"
)

// KeyCollision says where two keys of one YAML mapping become the same
// JSON key ("" if none do): the conversion to JSON (sigs.k8s.io/yaml)
// turns a key 1, 1.0, 0x1 or true into the string "1" or "true", so `1:`
// and `"1":` in one mapping merge into one key and one of the two values
// silently wins, which the YAML parser's own duplicate check (of equal
// keys only) does not see. The message is "line N: …", N the later key's
// line, as YAMLMessage's. Keys are read as the conversion reads them (YAML
// 1.1, go.yaml.in/yaml/v2); merge keys (<<) are left out, since an explicit
// key overrides a merged one by design. Content the node parser cannot
// read is left to the conversion.
func KeyCollision(data []byte) string {
	var root yamlv3.Node
	if yamlv3.NewDecoder(bytes.NewReader(data)).Decode(&root) != nil {
		return ""
	}
	var walk func(n *yamlv3.Node, depth int) string
	walk = func(n *yamlv3.Node, depth int) string {
		if n == nil || depth > 10000 {
			return ""
		}
		if n.Kind == yamlv3.MappingNode {
			seen := map[string]*yamlv3.Node{}
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i]
				if key, ok := jsonKey(k); ok {
					if first := seen[key]; first != nil {
						return fmt.Sprintf("line %d: the keys %s (line %d) and %s both become the key %q, and one would silently win",
							k.Line, written(first), first.Line, written(k), key)
					}
					seen[key] = k
				}
			}
		}
		// An alias's node is walked where it is defined.
		for _, c := range n.Content {
			if m := walk(c, depth+1); m != "" {
				return m
			}
		}
		return ""
	}
	return walk(&root, 0)
}

// jsonKey is the JSON key sigs.k8s.io/yaml makes of the mapping key k
// (ok false for a merge key, or a key it cannot convert: the conversion
// reports that).
func jsonKey(k *yamlv3.Node) (string, bool) {
	if k.Kind == yamlv3.AliasNode {
		k = k.Alias
	}
	if k == nil || k.Kind != yamlv3.ScalarNode || k.Tag == "!!merge" {
		return "", false
	}
	quoted := k.Style&(yamlv3.DoubleQuotedStyle|yamlv3.SingleQuotedStyle|yamlv3.LiteralStyle|yamlv3.FoldedStyle) != 0
	tagged := k.Style&yamlv3.TaggedStyle != 0
	switch {
	case tagged && k.Tag == "!!str", !tagged && quoted:
		return k.Value, true
	case tagged && quoted:
		return "", false // another tag on a quoted key: rare, left alone
	}
	text := k.Value
	if tagged {
		text = k.Tag + " " + text
	}
	var v any
	if yamlv2.Unmarshal([]byte(text), &v) != nil {
		return "", false
	}
	// As sigs.k8s.io/yaml's convertToJSONableObject.
	switch t := v.(type) {
	case string:
		return t, true
	case int:
		return strconv.Itoa(t), true
	case int64:
		return strconv.FormatInt(t, 10), true
	case float64:
		s := strconv.FormatFloat(t, 'g', -1, 32)
		switch s {
		case "+Inf":
			s = ".inf"
		case "-Inf":
			s = "-.inf"
		case "NaN":
			s = ".nan"
		}
		return s, true
	case bool:
		return strconv.FormatBool(t), true
	}
	return "", false
}

// written is a key as the file writes it, for a message.
func written(k *yamlv3.Node) string {
	if k.Kind == yamlv3.AliasNode {
		return "*" + k.Value
	}
	if k.Style&(yamlv3.DoubleQuotedStyle|yamlv3.SingleQuotedStyle) != 0 {
		return strconv.Quote(k.Value)
	}
	return k.Value
}
