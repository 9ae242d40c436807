package secretscan_test

import (
	"strings"
	"testing"

	"github.com/mcpbus/mcpbus/libs/secretscan"
)

// BenchmarkScan is the scanner's cost on a call's typical payloads.
func BenchmarkScan(b *testing.B) {
	s := scanner(b)
	values := make([]string, 100)
	for i := range values {
		values[i] = strings.Repeat(string(rune('a'+i%26)), 12+i%20)
	}
	known := secretscan.NewKnown([]byte("k"), values)
	for _, c := range []struct{ name, payload string }{
		{"args-small", `{"city":"Paris","units":"metric"}`},
		{"prose-1KiB", `{"message":"` + strings.Repeat("Rotate the API key and the access token; never share a password. ", 16) + `"}`},
		{"result-64KiB", `{"content":[{"type":"text","text":"` + strings.Repeat("x", 65536) + `"}]}`},
		{"result-1KiB", `{"content":[{"type":"text","text":"` + strings.Repeat("lorem ipsum dolor sit amet ", 38) + `"}]}`},
		{"prose-64KiB", `{"content":[{"type":"text","text":"` + strings.Repeat("Rotate the API key and the access token; never share a password. ", 1024) + `"}]}`},
		{"json-64KiB", `{"rows":[` + strings.Repeat(`{"id":12345,"name":"row","ok":true,"tags":["a","b"],"token":null},`, 1000) + `{}]}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			p := []byte(c.payload)
			b.SetBytes(int64(len(p)))
			for b.Loop() {
				s.Scan(p, known)
			}
		})
	}
}
