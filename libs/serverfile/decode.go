package serverfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tailscale/hujson"
	yamlv3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// document is decoded content: map[string]any, []any, string, json.Number,
// bool or nil, whatever the syntax was.
type document struct {
	root any
	data []byte // root as JSON, for the formats that decode it into their own types
	json bool   // written as JSON (else YAML)
}

// decode reads JSON (with the comments and trailing commas VS Code allows) or
// YAML. Syntax errors say where (line and, for JSON, column); duplicate keys
// are errors, since the last one would silently win.
func decode(content []byte) (document, error) {
	data := bytes.TrimPrefix(content, []byte("\xef\xbb\xbf"))
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return document{}, apierr.Invalid("content", "content is empty")
	}
	if !utf8.Valid(data) {
		return document{}, apierr.Invalid("content", "content is not UTF-8 text")
	}
	var jsonData []byte
	// A leading / is a comment of VS Code's JSON (YAML has no use for it here).
	isJSON := trimmed[0] == '{' || trimmed[0] == '[' || trimmed[0] == '/'
	if isJSON {
		var err error
		if jsonData, err = standardJSON(data); err != nil {
			return document{}, err
		}
	} else {
		if err := aliasExpansion(data); err != nil {
			return document{}, err
		}
		var err error
		if jsonData, err = yaml.YAMLToJSONStrict(data); err != nil {
			return document{}, apierr.Wrap(apierr.Validation, "invalid YAML: "+YAMLMessage(data, err), err).WithField("content")
		}
		if m := KeyCollision(data); m != "" {
			return document{}, apierr.Invalid("content", "invalid YAML: "+m)
		}
		if at := secondDocument(data); at != "" {
			return document{}, apierr.Invalid("content", "invalid YAML: a second document (after ---) at "+at+": a servers file is one document")
		}
	}
	root, err := decodeValue(jsonData)
	if err != nil {
		return document{}, apierr.Wrap(apierr.Validation, "content cannot be read: "+err.Error(), err).WithField("content")
	}
	if root == nil {
		return document{}, apierr.Invalid("content", "content is empty")
	}
	if field, err := duplicateKey(jsonData); err != nil {
		return document{}, apierr.Invalid(field, err.Error())
	}
	return document{root: root, data: jsonData, json: isJSON}, nil
}

// maxExpansion bounds the text a YAML file's aliases may make: the
// conversion to JSON copies an aliased value at every alias, so a 1 MiB
// string under an anchor used a thousand times (a file of 1 MiB) would make
// a gigabyte. The YAML parser's own limit counts aliases, not bytes.
const maxExpansion = 8 << 20

// aliasExpansion refuses YAML whose aliases would expand it past
// maxExpansion bytes of scalars (or past twice its size, for a larger file).
// Sizes are computed on the node tree, once per anchored node, so an
// exponential bomb costs no more than its text. A file the node parser
// cannot read is left to the conversion, which reports the error.
func aliasExpansion(data []byte) error {
	var root yamlv3.Node
	if yamlv3.NewDecoder(bytes.NewReader(data)).Decode(&root) != nil {
		return nil
	}
	limit := max(maxExpansion, 2*len(data))
	sizes := map[*yamlv3.Node]int{}
	var size func(n *yamlv3.Node, depth int) int
	size = func(n *yamlv3.Node, depth int) int {
		if n == nil || depth > 10000 {
			return 0
		}
		if s, ok := sizes[n]; ok {
			return s
		}
		sizes[n] = limit + 1 // an alias of a node being sized: a cycle
		total := len(n.Value)
		if n.Kind == yamlv3.AliasNode {
			total = size(n.Alias, depth+1)
		}
		for _, c := range n.Content {
			total += size(c, depth+1)
			if total > limit {
				break
			}
		}
		total = min(total, limit+1)
		sizes[n] = total
		return total
	}
	if size(&root, 0) > limit {
		return apierr.Invalid("content", fmt.Sprintf("invalid YAML: its aliases (*name) expand it to more than %d MiB", limit>>20))
	}
	return nil
}

// secondDocument says where a second YAML document with content starts ("" if
// there is none). The conversion to JSON reads the first document only, so
// the servers of a second one would be dropped without a word. Documents are
// read as nodes: aliases are not expanded.
func secondDocument(data []byte) string {
	dec := yamlv3.NewDecoder(bytes.NewReader(data))
	var first yamlv3.Node
	if dec.Decode(&first) != nil {
		return ""
	}
	for {
		var next yamlv3.Node
		err := dec.Decode(&next)
		if err == io.EOF {
			return ""
		}
		if err != nil {
			// A document the conversion never read: refused all the same.
			return strings.TrimPrefix(err.Error(), "yaml: ")
		}
		if len(next.Content) > 0 && (next.Content[0].Kind != yamlv3.ScalarNode || next.Content[0].Tag != "!!null") {
			return fmt.Sprintf("line %d", next.Content[0].Line)
		}
	}
}

// decodeValue decodes the JSON value data starts with, numbers as json.Number.
func decodeValue(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

// standardJSON checks data as JSON; JSON with comments or trailing commas
// (VS Code's mcp.json) is standardized in place, offsets unchanged.
func standardJSON(data []byte) ([]byte, error) {
	err := json.Unmarshal(data, new(json.RawMessage))
	if err == nil {
		return data, nil
	}
	if std, herr := hujson.Standardize(bytes.Clone(data)); herr == nil {
		return std, nil
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line, col := lineColumn(data, se.Offset)
		return nil, apierr.Wrap(apierr.Validation, fmt.Sprintf("JSON syntax error at line %d, column %d: %s", line, col, se.Error()), err).WithField("content")
	}
	return nil, apierr.Wrap(apierr.Validation, "JSON syntax error: "+err.Error(), err).WithField("content")
}

// lineColumn is the 1-based line and column (in characters) of the byte a
// json.SyntaxError points after.
func lineColumn(data []byte, offset int64) (int, int) {
	p := int(min(max(offset-1, 0), int64(len(data))))
	before := data[:p]
	line := bytes.Count(before, []byte("\n")) + 1
	start := bytes.LastIndexByte(before, '\n') + 1
	return line, utf8.RuneCount(before[start:]) + 1
}

// YAMLMessage turns "error converting YAML to JSON: yaml: line 3: …" into
// "line 3: …" on one line, with the line right: the YAML parser
// (go.yaml.in/yaml/v2, under sigs.k8s.io/yaml) counts the lines of its parser
// errors from 0 (its scanner errors from 1), so "did not find expected key"
// on line 3 comes as line 2. data is the YAML that failed.
func YAMLMessage(data []byte, err error) string {
	m := err.Error()
	m = strings.TrimPrefix(m, "error converting YAML to JSON: ")
	m = strings.TrimPrefix(m, "yaml: ")
	m = strings.TrimPrefix(m, "unmarshal errors:")
	m = strings.Join(strings.Fields(m), " ")
	rest, ok := strings.CutPrefix(m, "line ")
	if !ok {
		return m
	}
	num, problem, ok := strings.Cut(rest, ": ")
	line, convErr := strconv.Atoi(num)
	if !ok || convErr != nil || !parserProblem(problem) {
		return m
	}
	// An error at the end of the input points past the last line.
	lines := bytes.Count(data, []byte("\n"))
	if len(data) > 0 && data[len(data)-1] != '\n' {
		lines++
	}
	return fmt.Sprintf("line %d: %s", max(1, min(line+1, lines)), problem)
}

// parserProblem reports whether problem is one of the YAML parser's (not
// scanner's) messages: the list of yaml_parser_set_parser_error* calls of
// go.yaml.in/yaml/v2's parserc.go.
func parserProblem(problem string) bool {
	for _, p := range []string{
		"did not find expected ',' or ']'", "did not find expected ',' or '}'",
		"did not find expected '-' indicator", "did not find expected <document start>",
		"did not find expected <stream-start>", "did not find expected key",
		"did not find expected node content", "found duplicate %TAG directive",
		"found duplicate %YAML directive", "found incompatible YAML document",
		"found undefined tag handle",
	} {
		if problem == p {
			return true
		}
	}
	return false
}

// duplicateKey walks valid JSON and reports the path of a key written twice.
func duplicateKey(data []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var walk func(path string) error
	walk = func(path string) error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return err
				}
				key, _ := k.(string)
				child := join(path, key)
				if seen[key] {
					return &dupError{path: child, key: key}
				}
				seen[key] = true
				if err := walk(child); err != nil {
					return err
				}
			}
			_, err = dec.Token()
			return err
		case json.Delim('['):
			for i := 0; dec.More(); i++ {
				if err := walk(path + "[" + strconv.Itoa(i) + "]"); err != nil {
					return err
				}
			}
			_, err = dec.Token()
			return err
		}
		return nil
	}
	err := walk("")
	var de *dupError
	if errors.As(err, &de) {
		return de.path, de
	}
	if err != nil && err != io.EOF {
		return "content", err
	}
	return "", nil
}

type dupError struct{ path, key string }

func (e *dupError) Error() string { return fmt.Sprintf("duplicate key %q", e.key) }

// join appends a key to a field path.
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
