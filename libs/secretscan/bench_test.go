package secretscan_test

import (
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

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
		// Distinct 20-byte tokens, a length of the known values: each is
		// fingerprinted (the known-value check's worst case).
		{"ids-64KiB", `{"ids":["` + strings.Join(ids(2800, 20), `","`) + `"]}`},
		// Varied sentences whose words send rules to their regexps ("s."
		// ends many words, "sk" in "ask", curl, auth): the costliest text.
		{"words-64KiB", `{"message":"` + keywordProse(65536) + `"}`},
		// Lines of text, as most results are: a JSON \n escape in every
		// line, which the rules read as whitespace (blankEscapes).
		{"lines-64KiB", `{"content":[{"type":"text","text":"` + strings.Repeat(`lorem ipsum dolor sit amet, consectetur adipiscing\n`, 1260) + `"}]}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			p := []byte(c.payload)
			b.SetBytes(int64(len(p)))
			start := processCPU()
			for b.Loop() {
				s.Scan(p, known)
			}
			// CPU time, not wall: on a shared machine the wall time of a
			// run is mostly waiting for a core.
			b.ReportMetric(float64(processCPU()-start)/float64(b.N)/float64(len(p)), "cpu-ns/B")
		})
	}
}

// processCPU is this process's user and system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ids are n distinct pseudo-random texts of length l.
func ids(n, l int) []string {
	const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	out := make([]string, n)
	x := uint64(88172645463325252)
	for i := range out {
		b := make([]byte, l)
		for j := range b {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			b[j] = alnum[x%uint64(len(alnum))]
		}
		out[i] = string(b)
	}
	return out
}

// keywordProse is n bytes of sentences drawn from words that hold rule
// keywords and words that do not (the runner's BenchmarkCallSecrets row).
func keywordProse(n int) string {
	rnd := rand.New(rand.NewPCG(1, 2))
	vocab := strings.Fields(`the a to of and in rotate API key access token never share password secrets ` +
		`credentials configuration ask task tasks risk desk curl auth authorization header bearer deploys ` +
		`runs servers users requests logs services values settings 2026 42 v1.4 https://example.com/docs`)
	var sb strings.Builder
	for sb.Len() < n {
		for w := range 4 + rnd.IntN(12) {
			if w > 0 {
				sb.WriteByte(' ')
			}
			sb.WriteString(vocab[rnd.IntN(len(vocab))])
		}
		sb.WriteString(". ")
	}
	return sb.String()[:n]
}
