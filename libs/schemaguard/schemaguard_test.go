package schemaguard

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestSafeSchemasResolve(t *testing.T) {
	for _, s := range []string{
		`{"type":"object"}`,
		`true`,
		`{"type":"object","properties":{"a":{"$ref":"#/$defs/s"},"b":{"$ref":"#/$defs/s"}},"$defs":{"s":{"type":"string"}}}`,
		`{"type":"object","properties":{"a":{"$ref":"#/definitions/s"}},"definitions":{"s":{"type":"string"}}}`,
		`{"type":"object","properties":{"a":{"$ref":"#name"}},"$defs":{"s":{"$anchor":"name","type":"string"}}}`,
		`{"type":"object","properties":{"a/b":{"type":"string"},"c":{"$ref":"#/properties/a~1b"}}}`,
		`{"type":"object","properties":{"a b":{"type":"string"},"c":{"$ref":"#/properties/a%20b"}}}`,
		`{"$id":"https://example.com/s","type":"object","properties":{"a":{"$ref":"#/$defs/s"}},"$defs":{"s":{"type":"string"}}}`,
		`{"type":"object","dependencies":{"a":["b"],"c":{"required":["d"]}},"items":[{"type":"string"}]}`,
	} {
		if _, err := Resolve([]byte(s)); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
}

func TestUnsafeSchemasRefused(t *testing.T) {
	var fan strings.Builder
	fan.WriteString(`{"$ref":"#/$defs/d0","$defs":{`)
	for i := range 30 {
		fmt.Fprintf(&fan, `"d%d":{"allOf":[{"$ref":"#/$defs/d%d"},{"$ref":"#/$defs/d%d"}]},`, i, i+1, i+1)
	}
	fan.WriteString(`"d30":{"type":"string"}}}`)
	for _, s := range []string{
		`{"$ref":"#"}`,
		`{"type":"object","properties":{"a":{"not":{"$ref":"#"}}}}`,
		`{"$ref":"#/$defs/a","$defs":{"a":{"allOf":[{"$ref":"#/$defs/b"}]},"b":{"if":{"$ref":"#/$defs/a"}}}}`,
		`{"$ref":"#x","$defs":{"a":{"$anchor":"x","anyOf":[{"$ref":"#x"}]}}}`,
		`{"$defs":{"node":{"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}}}},"$ref":"#/$defs/node"}`,
		fan.String(),
		`{"$dynamicRef":"#meta"}`,
		`{"properties":{"a":{"$ref":"https://example.com/s.json"}}}`,
		`{"properties":{"a":{"$ref":"#/nowhere"}}}`,
		`{"$defs":{"a":{"$id":"https://example.com/a","$ref":"#"}}}`,
	} {
		if _, err := Resolve([]byte(s)); !errors.Is(err, ErrUnsafe) {
			t.Errorf("%.80s: %v, want ErrUnsafe", s, err)
		}
	}
	// Many subschemas without refs: past the bound too.
	var b strings.Builder
	b.WriteString(`{"type":"object","properties":{`)
	for i := range MaxSubschemas + 1 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"p%d":{"type":"string"}`, i)
	}
	b.WriteString(`}}`)
	if err := Check([]byte(b.String())); !errors.Is(err, ErrUnsafe) {
		t.Errorf("%d properties: %v", MaxSubschemas+1, err)
	}
}

func TestCheckForm(t *testing.T) {
	if err := CheckForm([]byte(`{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`)); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		`{"type":"object","$ref":"#"}`,
		`{"type":"object","properties":{"a":{"type":"string","not":{"$ref":"#"}}}}`,
		`{"type":"object","properties":{"a":{"type":"string","allOf":[{"$dynamicRef":"#x"}]}}}`,
	} {
		if err := CheckForm([]byte(s)); !errors.Is(err, ErrUnsafe) {
			t.Errorf("%s: %v", s, err)
		}
	}
}

// Every keyword the validator reads a subschema from is followed: a loop
// through any of them is found.
func TestLoopsThroughEveryKeyword(t *testing.T) {
	for _, wrap := range []string{
		`{"additionalProperties":%s}`, `{"additionalItems":%s}`, `{"items":%s}`, `{"items":[%s]}`, `{"contains":%s}`,
		`{"propertyNames":%s}`, `{"not":%s}`, `{"if":%s}`, `{"then":%s}`, `{"else":%s}`, `{"unevaluatedItems":%s}`,
		`{"unevaluatedProperties":%s}`, `{"contentSchema":%s}`, `{"allOf":[%s]}`, `{"anyOf":[%s]}`, `{"oneOf":[%s]}`,
		`{"prefixItems":[%s]}`, `{"properties":{"a":%s}}`, `{"patternProperties":{"a":%s}}`, `{"dependentSchemas":{"a":%s}}`,
		`{"$defs":{"a":%s}}`, `{"definitions":{"a":%s}}`, `{"dependencies":{"a":%s}}`,
	} {
		s := fmt.Sprintf(wrap, `{"$ref":"#"}`)
		if err := Check([]byte(s)); !errors.Is(err, ErrUnsafe) {
			t.Errorf("%s: %v", s, err)
		}
	}
}

func BenchmarkCheck(b *testing.B) {
	var s strings.Builder
	s.WriteString(`{"type":"object","properties":{`)
	for i := range 200 {
		if i > 0 {
			s.WriteByte(',')
		}
		fmt.Fprintf(&s, `"p%d":{"type":"object","properties":{"a":{"$ref":"#/$defs/s"},"b":{"type":"array","items":{"type":"string"}}}}`, i)
	}
	s.WriteString(`},"$defs":{"s":{"type":"string","maxLength":10}}}`)
	raw := []byte(s.String())
	b.ReportAllocs()
	for b.Loop() {
		if err := Check(raw); err != nil {
			b.Fatal(err)
		}
	}
}
