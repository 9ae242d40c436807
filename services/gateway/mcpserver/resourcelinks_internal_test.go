package mcpserver

import (
	"strings"
	"testing"
)

// A link is namespaced however the server spells its keys and type: with
// escapes (which a decoder unescapes) or in another case (Go's decoder
// ignores case, though go-sdk's does not); a result without any is returned as it is, not re-encoded.
func TestLinkedURIsEverySpelling(t *testing.T) {
	for _, raw := range []string{
		`{"content":[{"type":"resource_link","uri":"mcpbus://b/x","name":"n"}]}`,
		`{"content":[{"type":"resourc\u0065_link","ur\u0069":"mcpbus://b/x","name":"n"}]}`,
		`{"Content":[{"TYPE":"resource_link","URI":"mcpbus://b/x","name":"n"}]}`,
		`{"content":[{"type":"resource","resource":{"uri":"mcpbus://b/x","text":"t"}}]}`,
		`{"content":[{"type":"resource","Resource":{"Uri":"mcpbus://b/x","text":"t"}}]}`,
		// Given twice, each decoder keeps one: neither passes.
		`{"content":[{"type":"resource_link","uri":"mcpbus://b/x","name":"n"}],"content":[]}`,
		`{"content":[],"content":[{"type":"resource_link","uri":"mcpbus://b/x","uri":"mcpbus://b/x","name":"n"}]}`,
		// An item that is no object (a client may skip it) hides no other's link.
		`{"content":[{"type":"resource_link","uri":"mcpbus://b/x","name":"n"},7,"x"]}`,
	} {
		out := string(linkedURIs([]byte(raw), "a"))
		kept := !strings.HasSuffix(raw, `"content":[]}`) // the last content has the link
		if strings.Contains(out, `"mcpbus://b/x"`) || strings.Contains(out, resourceURI("a", "mcpbus://b/x")) != kept ||
			strings.Count(out, `"content"`) > 1 {
			t.Errorf("%s → %s", raw, out)
		}
	}
	plain := []byte(`{"content":[{"type":"text","text":"a \u003cb\u003e"}]}`)
	if out := linkedURIs(plain, "a"); &out[0] != &plain[0] {
		t.Errorf("a result without links was rewritten: %s", out)
	}
	if !escapesLetters([]byte(`"\u0072"`)) || escapesLetters([]byte(`"\u003c\u0026\u2028"`)) {
		t.Error("escapesLetters")
	}
}

// What every tool result without a link pays (most of them): plain text,
// and text full of the escapes Go's encoder writes for < and >.
func BenchmarkLinkedURIsNone(b *testing.B) {
	for name, text := range map[string]string{"plain": "lorem ipsum dolor sit ", "escaped": "lorem ipsum \\u003cdolor\\u003e "} {
		raw := []byte(`{"content":[{"type":"text","text":"` + strings.Repeat(text, 100) + `"}]}`)
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				if out := linkedURIs(raw, "a"); &out[0] != &raw[0] {
					b.Fatal("rewritten")
				}
			}
		})
	}
}
