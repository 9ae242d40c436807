// Package elicitform is the part of MCP form elicitation (elicitation/create)
// that mcpbus puts to a person: a requested schema that is a flat object of
// primitive properties (string with format, enum, minLength/maxLength;
// number and integer with minimum/maximum; boolean) and a required list.
// Parse reads such a schema (and refuses anything else with the reason);
// Form.Check checks an answer against it, one field error per property, so
// the chat service, the terminal and the console agree on what is valid.
package elicitform

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/google/jsonschema-go/jsonschema"
)

// Types of a field.
const (
	String  = "string"
	Number  = "number"
	Integer = "integer"
	Boolean = "boolean"
)

// Field is one property of a form.
type Field struct {
	Name        string
	Type        string
	Title       string
	Description string
	// Format is email, uri, date or date-time (strings only).
	Format string
	// Enum are the allowed values of a string field (none: any string).
	Enum                 []string
	MinLength, MaxLength *int
	Minimum, Maximum     *float64
	// Default is the schema's default value (nil: none).
	Default  any
	Required bool

	schema *jsonschema.Resolved
}

// Label is the field's title, else its name.
func (f Field) Label() string {
	if f.Title != "" {
		return f.Title
	}
	return f.Name
}

// Form is a parsed requested schema: its fields in the schema's order.
type Form struct {
	Fields []Field
}

// Parse reads a requested schema; the error says why it is not a form
// mcpbus can put to a person.
func Parse(raw json.RawMessage) (*Form, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return &Form{}, nil
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("the requested schema is not a JSON schema: %w", err)
	}
	if s.Type != "" && s.Type != "object" {
		return nil, fmt.Errorf("the requested schema must be an object, not %q", s.Type)
	}
	order, err := propertyOrder(raw)
	if err != nil {
		return nil, err
	}
	for _, r := range s.Required {
		if _, ok := s.Properties[r]; !ok {
			return nil, fmt.Errorf("required property %q is not among the properties", r)
		}
	}
	f := &Form{}
	for _, name := range order {
		p := s.Properties[name]
		if p == nil {
			return nil, fmt.Errorf("property %q has no schema", name)
		}
		fd, err := field(name, p)
		if err != nil {
			return nil, err
		}
		fd.Required = slices.Contains(s.Required, name)
		f.Fields = append(f.Fields, fd)
	}
	return f, nil
}

// field reads one property, refusing what is outside the form subset.
func field(name string, p *jsonschema.Schema) (Field, error) {
	fd := Field{Name: name, Type: p.Type, Title: p.Title, Description: p.Description, Format: p.Format,
		MinLength: p.MinLength, MaxLength: p.MaxLength, Minimum: p.Minimum, Maximum: p.Maximum}
	if fd.Type == "" && len(p.Enum) > 0 {
		fd.Type = String
	}
	switch {
	case len(p.Properties) > 0 || p.Items != nil || len(p.OneOf) > 0 || len(p.AnyOf) > 0 || len(p.AllOf) > 0 || p.Ref != "":
		return fd, fmt.Errorf("property %q is not a plain value (nested objects, arrays, oneOf/anyOf and $ref are outside the form subset)", name)
	case fd.Type != String && fd.Type != Number && fd.Type != Integer && fd.Type != Boolean:
		return fd, fmt.Errorf("property %q has type %q; a form takes string, number, integer or boolean", name, p.Type)
	case fd.Format != "" && (fd.Type != String || !slices.Contains([]string{"email", "uri", "date", "date-time"}, fd.Format)):
		return fd, fmt.Errorf("property %q has format %q; a form takes email, uri, date or date-time on strings", name, fd.Format)
	}
	for _, v := range p.Enum {
		s, ok := v.(string)
		if !ok || fd.Type != String {
			return fd, fmt.Errorf("property %q: a form's enums are strings", name)
		}
		fd.Enum = append(fd.Enum, s)
	}
	if len(p.Default) > 0 {
		if err := json.Unmarshal(p.Default, &fd.Default); err != nil {
			return fd, fmt.Errorf("property %q has a bad default: %w", name, err)
		}
	}
	rs, err := p.Resolve(nil)
	if err != nil {
		return fd, fmt.Errorf("property %q: %w", name, err)
	}
	fd.schema = rs
	return fd, nil
}

// propertyOrder is the order of the keys of the schema's properties object
// (a Go map forgets it, and a form shows its fields in the server's order).
func propertyOrder(raw json.RawMessage) ([]string, error) {
	var top struct {
		Properties json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(raw, &top); err != nil || len(top.Properties) == 0 {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(top.Properties))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("the requested schema's properties must be an object")
	}
	var keys []string
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("the requested schema's properties: %w", err)
		}
		keys = append(keys, t.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, fmt.Errorf("the requested schema's properties: %w", err)
		}
	}
	return keys, nil
}
