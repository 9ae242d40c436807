package runner

import (
	"github.com/mcpbus/mcpbus/libs/jsonscan"
	"github.com/mcpbus/mcpbus/libs/secretscan"
)

// minBinary is the shortest base64 value the secret scan leaves out: a
// shorter one costs little to scan, and a secret written in clear where
// data belongs would be about this short.
const minBinary = 256

// binaryData is where a tool result (a CallToolResult's JSON) holds base64
// data: the data of its image and audio content, the blob of an embedded
// resource, each a whole JSON string (quotes included) of at least
// minBinary bytes, every one a base64 character. The secret scan leaves
// them out (secretscan.ScanSkipping): no rule or known value can be read
// in encoded bytes, and scanning a screenshot cost milliseconds.
func binaryData(result []byte) []secretscan.Span {
	var out []secretscan.Span
	add := func(val []byte) {
		if len(val) >= minBinary+2 && val[0] == '"' && isBase64(val[1:len(val)-1]) {
			start := cap(result) - cap(val) // val is a slice of result
			out = append(out, secretscan.Span{Start: start, End: start + len(val)})
		}
	}
	jsonscan.Members(result, func(key, content []byte) bool {
		if string(key) != "content" {
			return true
		}
		jsonscan.Elements(content, func(item []byte) bool {
			var kind string
			var data, resource []byte
			jsonscan.Members(item, func(k, v []byte) bool {
				switch string(k) {
				case "type":
					kind = string(v)
				case "data":
					data = v
				case "resource":
					resource = v
				}
				return true
			})
			switch kind {
			case `"image"`, `"audio"`:
				add(data)
			case `"resource"`:
				jsonscan.Members(resource, func(k, v []byte) bool {
					if string(k) == "blob" {
						add(v)
					}
					return true
				})
			}
			return true
		})
		return false
	})
	return out
}

// isBase64 reports whether every byte of b is of standard base64 (an
// escape or any other byte: not data, scanned). A table: the range tests
// branch unpredictably on random data (7 ns a byte against 0.5).
func isBase64(b []byte) bool {
	for _, c := range b {
		if !base64Bytes[c] {
			return false
		}
	}
	return true
}

var base64Bytes = func() (t [256]bool) {
	for _, c := range []byte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=") {
		t[c] = true
	}
	return t
}()
