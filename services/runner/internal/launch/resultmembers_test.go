package launch

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"
)

// TestKeepResultMembers: what leaves the runner is a CallToolResult, whatever
// else a server put into its result.
func TestKeepResultMembers(t *testing.T) {
	same := []byte(`{"content":[{"type":"text","text":"hi"}],"isError":false,"_meta":{"a":1},"structuredContent":{"x":1}}`)
	if got := KeepResultMembers(same); &got[0] != &same[0] {
		t.Errorf("a clean result was copied: %s", got)
	}
	dirty := []byte(`{"id":"k1","name":"x","scopes":["admin"],"content":[{"type":"text","text":"hi"}],"hash":"h","isError":true,"resultType":"complete"}`)
	got := KeepResultMembers(dirty)
	var m map[string]json.RawMessage
	if err := json.Unmarshal(got, &m); err != nil {
		t.Fatalf("%s: %v", got, err)
	}
	if keys := slices.Sorted(maps.Keys(m)); !slices.Equal(keys, []string{"content", "isError", "resultType"}) {
		t.Errorf("members %v of %s", keys, got)
	}
	if string(m["isError"]) != "true" || string(m["content"]) != `[{"type":"text","text":"hi"}]` {
		t.Errorf("values changed: %s", got)
	}
	// A member spelt with an escape is the member its reader decodes.
	escaped := []byte(`{"content":[],"is\u0045rror":true,"x":1}`)
	if got := KeepResultMembers(escaped); string(got) != `{"content":[],"is\u0045rror":true}` {
		t.Errorf("escaped member: %s", got)
	}
	if got := KeepResultMembers([]byte(`{"extra":1}`)); string(got) != `{}` {
		t.Errorf("only extras: %s", got)
	}
}
