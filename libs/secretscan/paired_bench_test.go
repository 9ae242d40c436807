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
