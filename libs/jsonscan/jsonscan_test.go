package jsonscan

import (
	"bytes"
	"encoding/json"
	"maps"
	"testing"
)

// Members agrees with encoding/json on the top-level members of valid objects.
func TestMembers(t *testing.T) {
	docs := []string{
		`{}`, ` { } `,
		`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"}\"]{"}]}}`,
		`{"id":"mcpbus-7","result":{"a":[1,2,{"b":"c\\\"}"}]},"jsonrpc":"2.0"}`,
		"{\n \"method\" : \"notifications/progress\" ,\t\"params\":{\"x\":null},\"n\":-1.5e3,\"t\":true,\"f\":false}",
		`{"error":{"code":-32602,"message":"unknown tool \"x\""},"id":"mcpbus-1","jsonrpc":"2.0"}`,
		`{"k\"ey":"v","":[[]],"u":"\u00e9\ud83d\ude00"}`,
	}
	for _, d := range docs {
		var want map[string]json.RawMessage
		if err := json.Unmarshal([]byte(d), &want); err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		checkMembers(t, d, want)
	}
	for _, bad := range []string{``, `[]`, `"x"`, `{`, `{"a"}`, `{"a":}`, `{"a":1`, `{"a":"x}`, `{"a":[1}`, `{"a":1 "b":2}`, `{1:2}`} {
		if Members([]byte(bad), func(k, v []byte) bool { return true }) {
			t.Errorf("%q accepted", bad)
		}
	}
}

// checkMembers fails t unless Members finds in d the members of want (d
// decoded by encoding/json), with the same values.
func checkMembers(t *testing.T, d string, want map[string]json.RawMessage) {
	t.Helper()
	got := map[string]json.RawMessage{}
	ok := Members([]byte(d), func(k, v []byte) bool {
		var key string
		if err := json.Unmarshal(append(append([]byte{'"'}, k...), '"'), &key); err != nil {
			t.Fatalf("key %s: %v", k, err)
		}
		got[key] = json.RawMessage(v)
		return true
	})
	if !ok {
		t.Fatalf("%s: not scanned", d)
	}
	for k := range want {
		w, _ := json.Marshal(want[k])
		g, _ := json.Marshal(got[k])
		if !bytes.Equal(w, g) {
			t.Errorf("%s: member %q = %s, want %s", d, k, got[k], want[k])
		}
	}
	if !maps.EqualFunc(want, got, func(a, b json.RawMessage) bool { return true }) {
		t.Errorf("%s: keys %v, want %v", d, got, want)
	}
}

// FuzzMembers: on any valid JSON object the scanner agrees with
// encoding/json; on anything else it must not panic.
func FuzzMembers(f *testing.F) {
	for _, s := range []string{`{}`, `{"id":"mcpbus-1","result":{"a":[1,"]}"]}}`, `{"k\"":[{}],"n":-1e3}`, `{"a":`, `[1]`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, d string) {
		var want map[string]json.RawMessage
		if json.Unmarshal([]byte(d), &want) != nil || want == nil {
			Members([]byte(d), func(k, v []byte) bool { return true })
			return
		}
		checkMembers(t, d, want)
	})
}

// Elements agrees with encoding/json on the elements of valid arrays.
func TestElements(t *testing.T) {
	for _, d := range []string{
		`[]`, ` [ ] `,
		`[{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"},{"type":"text","text":"]\"["}]`,
		"[1, -2.5e3 ,\"a\\\"]\",[[]],{\"k\":[1]},null,true,false]",
	} {
		var want []json.RawMessage
		if err := json.Unmarshal([]byte(d), &want); err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		var got []json.RawMessage
		if !Elements([]byte(d), func(v []byte) bool { got = append(got, json.RawMessage(v)); return true }) {
			t.Fatalf("%s: not scanned", d)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d elements, want %d", d, len(got), len(want))
		}
		for i := range want {
			w, _ := json.Marshal(want[i])
			g, _ := json.Marshal(got[i])
			if !bytes.Equal(w, g) {
				t.Errorf("%s: element %d = %s, want %s", d, i, got[i], want[i])
			}
		}
	}
	for _, bad := range []string{``, `{}`, `"x"`, `[`, `[1`, `[1,`, `[1 2]`, `["x]`, `[{]`} {
		if Elements([]byte(bad), func([]byte) bool { return true }) {
			t.Errorf("%q accepted", bad)
		}
	}
}

// Key decodes escapes as a JSON decoder does; KeepMembers writes what it
// keeps byte for byte.
func TestKeyAndKeepMembers(t *testing.T) {
	for raw, want := range map[string]string{
		`plain`: "plain", `structuredCont\u0065nt`: "structuredContent", `a\"b`: `a"b`, `bad\x`: `bad\x`,
	} {
		if got := Key([]byte(raw)); got != want {
			t.Errorf("Key(%s) = %q, want %q", raw, got, want)
		}
		if !KeyIs([]byte(raw), want) {
			t.Errorf("KeyIs(%s, %q) = false", raw, want)
		}
	}
	in := []byte(`{"a":1, "is\u0045rror" : true,"b":{"c":[1]},"x\"y":2}`)
	got := KeepMembers(in, func(k []byte) bool { return Key(k) != "b" })
	if want := `{"a":1,"is\u0045rror":true,"x\"y":2}`; string(got) != want {
		t.Fatalf("KeepMembers = %s, want %s", got, want)
	}
	var v map[string]any
	if err := json.Unmarshal(got, &v); err != nil || v["isError"] != true {
		t.Fatalf("kept members decode as %v, %v", v, err)
	}
}
