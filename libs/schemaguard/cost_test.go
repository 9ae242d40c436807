package schemaguard

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func decode(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// A schema and a value that are each small but whose check costs their
// product: an enum of 10,000 entries over 1,000 array items took 6.4 s of a
// core, an anyOf of 10,000 branches over as many 14 s. Neither is checked;
// the same schemas over a few items, and a large value of an ordinary
// schema, are.
func TestCostlyChecksAreNotMade(t *testing.T) {
	enum := `{"type":"object","properties":{"a":{"type":"array","items":{"enum":[` + strings.Repeat("0,", 10000) + `1]}}}}`
	var anyOf strings.Builder
	anyOf.WriteString(`{"type":"object","properties":{"a":{"type":"array","items":{"anyOf":[`)
	anyOf.WriteString(strings.Repeat(`{"const":0},`, MaxSubschemas-10))
	anyOf.WriteString(`{"const":1}]}}}}`)
	for name, schema := range map[string]string{"enum": enum, "anyOf": anyOf.String()} {
		s, err := Resolve([]byte(schema))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		many := decode(t, `{"a":[`+strings.Repeat("1,", 999)+`1]}`)
		if err := s.Validate(many); !errors.Is(err, ErrCostly) {
			t.Errorf("%s over 1,000 items: %v, want ErrCostly", name, err)
		}
		if err := s.Validate(decode(t, `{"a":[1,1,1]}`)); err != nil {
			t.Errorf("%s over 3 items: %v", name, err)
		}
		if err := s.Validate(decode(t, `{"a":[1,2]}`)); err == nil || errors.Is(err, ErrCostly) {
			t.Errorf("%s over a bad item: %v, want a violation", name, err)
		}
	}

	// 5,000 records of 10 fields (about 400 KiB) against their schema.
	var props, rec []string
	for i := range 10 {
		props = append(props, fmt.Sprintf(`"f%d":{"type":"string","enum":["x","y","z"]}`, i))
		rec = append(rec, fmt.Sprintf(`"f%d":"z"`, i))
	}
	s, err := Resolve([]byte(`{"type":"object","properties":{"rows":{"type":"array","items":{"type":"object","properties":{` + strings.Join(props, ",") + `},"additionalProperties":false}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	row := "{" + strings.Join(rec, ",") + "}"
	if err := s.Validate(decode(t, `{"rows":[`+strings.Repeat(row+",", 4999)+row+`]}`)); err != nil {
		t.Errorf("5,000 records: %v", err)
	}
}

// A value quoted in every failed branch: a schema whose anyOf tries 5,000
// types on a large object costs each branch the object's size.
func TestCostCountsTheQuotedValue(t *testing.T) {
	s, err := Resolve([]byte(`{"anyOf":[` + strings.Repeat(`{"type":"string"},`, 5000) + `{"type":"object"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("{")
	for i := range 20000 {
		fmt.Fprintf(&b, `"k%d":%d,`, i, i)
	}
	b.WriteString(`"end":0}`)
	if err := s.Validate(decode(t, b.String())); !errors.Is(err, ErrCostly) {
		t.Errorf("an object of 20,000 members under 5,000 failing branches: %v, want ErrCostly", err)
	}
	if err := s.Validate(decode(t, `{"a":1}`)); err != nil {
		t.Errorf("a small object: %v", err)
	}
}

// The quick bound never lets through what the walk would refuse: it is
// the larger of the two.
func TestQuickBoundIsAboveTheWalk(t *testing.T) {
	schemas := []string{
		`{"type":"object","properties":{"a":{"type":"array","items":{"enum":[` + strings.Repeat("0,", 300) + `1]}}}}`,
		`{"anyOf":[` + strings.Repeat(`{"type":"string"},`, 200) + `{"type":"object","additionalProperties":{"$ref":"#/$defs/x"}}],"$defs":{"x":{"const":[1,2,3]}}}`,
		`{"type":"object","patternProperties":{"^a":{"type":"integer"},"b":{"enum":[1,2]}},"propertyNames":{"maxLength":3}}`,
	}
	values := []string{`{}`, `{"a":[1,1,1]}`, `{"a":[` + strings.Repeat("1,", 200) + `1]}`, `{"ab":1,"b":2,"c":{"d":[1,2,[3]]}}`}
	for _, sc := range schemas {
		s, err := Resolve([]byte(sc))
		if err != nil {
			t.Fatalf("%.60s: %v", sc, err)
		}
		for _, val := range values {
			v := decode(t, val)
			quick := int64(s.g.inlined) * count(v) * (costVisit + costNode*count(v) + s.g.maxEntries)
			if walked := s.cost(v, 1<<62); walked > quick {
				t.Errorf("%.60s over %.40s: the walk counts %d, the quick bound %d", sc, val, walked, quick)
			}
		}
	}
}
