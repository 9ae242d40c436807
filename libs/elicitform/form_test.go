package elicitform_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/elicitform"
)

const profile = `{"type":"object","required":["name","age"],"properties":{
 "name":{"type":"string","title":"Name","minLength":2,"maxLength":10},
 "age":{"type":"integer","minimum":0,"maximum":150},
 "colour":{"type":"string","enum":["red","green"],"default":"red"},
 "email":{"type":"string","format":"email"},
 "ratio":{"type":"number","maximum":1},
 "subscribe":{"type":"boolean"}}}`

func TestParseKeepsOrderAndRefusesWhatIsNotAForm(t *testing.T) {
	f, err := elicitform.Parse(json.RawMessage(profile))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, fd := range f.Fields {
		names = append(names, fd.Name)
	}
	if strings.Join(names, ",") != "name,age,colour,email,ratio,subscribe" || !f.Fields[0].Required || f.Fields[2].Required ||
		f.Fields[2].Default != "red" || len(f.Fields[2].Enum) != 2 || f.Fields[0].Label() != "Name" {
		t.Fatalf("%+v", f.Fields)
	}
	for schema, want := range map[string]string{
		`{"type":"array"}`: "must be an object",
		`{"type":"object","properties":{"a":{"type":"object","properties":{"b":{"type":"string"}}}}}`:  "not a plain value",
		`{"type":"object","properties":{"a":{"type":"array","items":{"type":"string","enum":["x"]}}}}`: "not a plain value",
		`{"type":"object","properties":{"a":{"type":"string","format":"ipv4"}}}`:                       "format",
		`{"type":"object","properties":{"a":{"type":"null"}}}`:                                         "type",
		`{"type":"object","required":["b"],"properties":{"a":{"type":"string"}}}`:                      "not among the properties",
	} {
		if _, err := elicitform.Parse(json.RawMessage(schema)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", schema, err, want)
		}
	}
}

func TestCheckNamesTheBadField(t *testing.T) {
	f, err := elicitform.Parse(json.RawMessage(profile))
	if err != nil {
		t.Fatal(err)
	}
	for content, want := range map[string]string{
		`{"age":3}`:                            "name",
		`{"name":"x","age":3}`:                 "name",
		`{"name":"Ada","age":3.5}`:             "age",
		`{"name":"Ada","age":200}`:             "age",
		`{"name":"Ada","age":"3"}`:             "age",
		`{"name":"Ada","age":3,"colour":"b"}`:  "colour",
		`{"name":"Ada","age":3,"email":"no"}`:  "email",
		`{"name":"Ada","age":3,"ratio":2}`:     "ratio",
		`{"name":"Ada","age":3,"subscribe":1}`: "subscribe",
		`{"name":"Ada","age":3,"extra":1}`:     "extra",
		`{"name":"Ada","age":3,"colour":"green","email":"a@b.org","ratio":0.5,"subscribe":true}`: "",
	} {
		var c map[string]any
		if err := json.Unmarshal([]byte(content), &c); err != nil {
			t.Fatal(err)
		}
		e := f.Check(c)
		switch {
		case want == "" && e != nil:
			t.Errorf("%s: %v", content, e)
		case want != "" && (e == nil || e.Field != want || e.Code != apierr.Validation):
			t.Errorf("%s: %v, want field %s", content, e, want)
		}
	}
	if e := f.Check(map[string]any{"name": "Ada", "age": 200.0}); e == nil || !strings.Contains(e.Message, "at most 150") {
		t.Fatalf("the message does not say the bound: %v", e)
	}
}

func TestValueReadsTypedText(t *testing.T) {
	f, _ := elicitform.Parse(json.RawMessage(profile))
	by := map[string]elicitform.Field{}
	for _, fd := range f.Fields {
		by[fd.Name] = fd
	}
	if v, err := by["age"].Value(" 42 "); err != nil || v != 42.0 {
		t.Fatalf("%v %v", v, err)
	}
	if _, err := by["age"].Value("old"); err == nil {
		t.Fatal("a word was taken as an integer")
	}
	if v, err := by["colour"].Value("2"); err != nil || v != "green" {
		t.Fatalf("the number of a choice: %v %v", v, err)
	}
	if v, err := by["subscribe"].Value("yes"); err != nil || v != true {
		t.Fatalf("%v %v", v, err)
	}
	if _, err := by["name"].Value("A"); err == nil || !strings.Contains(err.Error(), "at least 2") {
		t.Fatalf("%v", err)
	}
}
