package secretscan

import (
	"strings"
	"testing"
	"time"
)

// BenchmarkGitleaksPaired compares, call by call in one run (the machine
// is shared: only ratios within a run mean anything), gitleaks run through
// one detector of every rule (the previous path) and through the detector
// of the rules whose keywords a payload holds (Scanner.gitleaks).
func BenchmarkGitleaksPaired(b *testing.B) {
	s, err := New()
	if err != nil {
		b.Fatal(err)
	}
	var all ruleSet
	for i := range s.rules {
		all.add(i)
	}
	full := s.detector(all)
	for _, c := range []struct{ name, payload string }{
		{"prose-1KiB", `{"message":"` + strings.Repeat("Rotate the API key and the access token; never share a password. ", 16) + `"}`},
		{"prose-64KiB", `{"content":[{"type":"text","text":"` + strings.Repeat("Rotate the API key and the access token; never share a password. ", 1024) + `"}]}`},
		{"aws-key-1KiB", `{"message":"` + strings.Repeat("lorem ipsum dolor sit amet ", 36) + ` AKIAZ3MQXP7R2HKW5Y4N"}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			p := []byte(c.payload)
			var whole, sub time.Duration
			for i := 0; b.Loop(); i++ {
				one := func() {
					t := time.Now()
					if set := s.keywords.rules(p); !set.empty() {
						full.DetectBytes(p)
					}
					whole += time.Since(t)
				}
				two := func() {
					t := time.Now()
					s.gitleaks(p)
					sub += time.Since(t)
				}
				if i%2 == 0 {
					one()
					two()
				} else {
					two()
					one()
				}
			}
			b.ReportMetric(float64(whole.Nanoseconds())/float64(b.N), "all-rules-ns/op")
			b.ReportMetric(float64(sub.Nanoseconds())/float64(b.N), "keyword-rules-ns/op")
			b.ReportMetric(float64(sub)/float64(whole), "ratio")
		})
	}
}

// BenchmarkPrefilterPaired compares in one run the keyword walk that tests
// each position's first three bytes in a bitset before comparing keywords
// (prefilter.rules) with the walk comparing the keywords of every pair that
// starts one (the previous one).
func BenchmarkPrefilterPaired(b *testing.B) {
	s, err := New()
	if err != nil {
		b.Fatal(err)
	}
	p := s.keywords
	pairsOnly := func(text []byte) ruleSet {
		out := p.always
		for i := 0; i+1 < len(text); i++ {
			w := p.starts[pair(text[i], text[i+1])]
			if w == 0 {
				continue
			}
			for j := range p.words[w] {
				if k := &p.words[w][j]; hasLowerPrefix(text[i:], k.word) {
					out.or(&k.rules)
				}
			}
		}
		return out
	}
	for _, c := range []struct{ name, payload string }{
		{"prose-64KiB", strings.Repeat("Rotate the API key and the access token; never share a password. ", 1024)},
		{"x-64KiB", strings.Repeat("x", 65536)},
		{"aws-key-1KiB", strings.Repeat("lorem ipsum dolor sit amet ", 36) + " AKIAZ3MQXP7R2HKW5Y4N"},
	} {
		b.Run(c.name, func(b *testing.B) {
			text := []byte(c.payload)
			if pairsOnly(text) != p.rules(text) {
				b.Fatal("the two walks find different rules")
			}
			var before, after time.Duration
			for i := 0; b.Loop(); i++ {
				t0 := time.Now()
				if i%2 == 0 {
					pairsOnly(text)
					t1 := time.Now()
					p.rules(text)
					before, after = before+t1.Sub(t0), after+time.Since(t1)
				} else {
					p.rules(text)
					t1 := time.Now()
					pairsOnly(text)
					after, before = after+t1.Sub(t0), before+time.Since(t1)
				}
			}
			b.ReportMetric(float64(before.Nanoseconds())/float64(b.N)/float64(len(text)), "pairs-ns/B")
			b.ReportMetric(float64(after.Nanoseconds())/float64(b.N)/float64(len(text)), "trigram-ns/B")
			b.ReportMetric(float64(after)/float64(before), "ratio")
		})
	}
}
