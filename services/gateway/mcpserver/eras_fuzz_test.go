package mcpserver

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// eraSeeds are results as servers of both eras write them.
var eraSeeds = []string{
	`{"content":[{"type":"text","text":"hi"}]}`,
	`{"content":[{"type":"text","text":"hi"}],"isError":true}`,
	`{"content":[],"resultType":"complete","_meta":{"io.modelcontextprotocol/serverInfo":{"name":"up","version":"1"}}}`,
	`{"_meta":{"a":1,"io.modelcontextprotocol/serverInfo":{}},"content":[],"structuredContent":{"_meta":2}}`,
	`{"resultType":"input_required","inputRequests":{"a":{}}}`,
	` { "content" : [ ] , "resultType" : "complete" } `,
	`{"resultType":"x","resultType":"complete"}`,
	`{"_meta":1,"content":[]}`,
	`{"result\u0054ype":"complete","content":[]}`,
	`{}`,
}

// FuzzEraResult: where the splice answers, its output is valid JSON and
// decodes to what the decoding rewrite gives, for both eras.
func FuzzEraResult(f *testing.F) {
	for _, s := range eraSeeds {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	info := json.RawMessage(`{"name":"mcpbus","version":"1"}`)
	f.Fuzz(func(t *testing.T, raw []byte, modern bool) {
		if !json.Valid(raw) {
			return // the runner replies with valid JSON only
		}
		si := json.RawMessage(nil)
		if modern {
			si = info
		}
		got, ok := spliceEraResult(raw, si)
		want, err := decodeEraResult(raw, si)
		if !ok {
			return
		}
		if err != nil {
			t.Fatalf("splice accepted %s, which decoding refuses: %v", raw, err)
		}
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("splice of %s is not JSON: %s: %v", raw, got, err)
		}
		if err := json.Unmarshal(want, &w); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("%s (modern %v):\nsplice %s\ndecode %s", raw, modern, got, want)
		}
	})
}

// BenchmarkEraResult prices the rewrite of a 2026-07-28 client's result:
// the splice against decoding, on a small and a 64 KiB result.
func BenchmarkEraResult(b *testing.B) {
	info := json.RawMessage(`{"name":"mcpbus","version":"1"}`)
	big, _ := json.Marshal(map[string]any{"content": []map[string]string{{"type": "text", "text": strings.Repeat("x", 64<<10)}}})
	for _, c := range []struct {
		name string
		raw  []byte
	}{{"small", []byte(eraSeeds[0])}, {"64KiB", big}} {
		b.Run("splice/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := spliceEraResult(c.raw, info); !ok {
					b.Fatal("declined")
				}
			}
		})
		b.Run("decode/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := decodeEraResult(c.raw, info); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
