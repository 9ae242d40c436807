package secretscan

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zricethezav/gitleaks/v8/report"

	"github.com/mcpbus/mcpbus/libs/testkit"
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
					if set := s.keywords.rules(p, nil); !set.empty() {
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
			if pairsOnly(text) != p.rules(text, nil) {
				b.Fatal("the two walks find different rules")
			}
			var before, after time.Duration
			for i := 0; b.Loop(); i++ {
				t0 := time.Now()
				if i%2 == 0 {
					pairsOnly(text)
					t1 := time.Now()
					p.rules(text, nil)
					before, after = before+t1.Sub(t0), after+time.Since(t1)
				} else {
					p.rules(text, nil)
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

// BenchmarkWindowsPaired compares in one run, call by call, order
// alternating, gitleaks run on the whole payload for every rule whose
// keyword it holds (the previous path) with Scanner.gitleaks (windowed
// rules on the windows around their keywords).
func BenchmarkWindowsPaired(b *testing.B) {
	s, err := New()
	if err != nil {
		b.Fatal(err)
	}
	rnd := rand.New(rand.NewPCG(5, 6))
	for _, c := range []struct{ name, payload string }{
		{"words-64KiB", `{"message":"` + prose(rnd, 65536) + `"}`},
		{"aws-key-64KiB", `{"message":"` + strings.Repeat("lorem ipsum dolor sit amet ", 2427) + ` AKIAZ3MQXP7R2HKW5Y4N"}`},
		{"aws-key-1KiB", `{"message":"` + strings.Repeat("lorem ipsum dolor sit amet ", 36) + ` AKIAZ3MQXP7R2HKW5Y4N"}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			p := []byte(c.payload)
			whole := func() []report.Finding {
				set := s.keywords.rules(p, nil)
				if set.empty() {
					return nil
				}
				return s.detector(set).DetectBytes(p)
			}
			if got, want := pairs(s.gitleaks(p)), pairs(whole()); !slices.Equal(got, want) {
				b.Fatalf("windows found %q, the whole payload %q", got, want)
			}
			var before, after time.Duration
			for i := 0; b.Loop(); i++ {
				t0 := time.Now()
				if i%2 == 0 {
					whole()
					t1 := time.Now()
					s.gitleaks(p)
					before, after = before+t1.Sub(t0), after+time.Since(t1)
				} else {
					s.gitleaks(p)
					t1 := time.Now()
					whole()
					after, before = after+t1.Sub(t0), before+time.Since(t1)
				}
			}
			b.ReportMetric(float64(before.Nanoseconds())/float64(b.N), "whole-ns/op")
			b.ReportMetric(float64(after.Nanoseconds())/float64(b.N), "windows-ns/op")
			b.ReportMetric(float64(after)/float64(before), "ratio")
		})
	}
}

// BenchmarkPasses is the CPU time per byte (this thread's, not wall: the
// machine is shared) of each pass of a scan over 64 KiB of keyword-dense
// prose: the keyword walk, gitleaks' rules, the nkey seed search, and the
// known-value check with 64 values of lengths 8 to 64 (every token of 8 to
// 64 bytes is fingerprinted, once per distinct text).
func BenchmarkPasses(b *testing.B) {
	s, err := New()
	if err != nil {
		b.Fatal(err)
	}
	var values []string
	for i := range 64 {
		values = append(values, strings.Repeat("k", 8+i*56/63))
	}
	known := NewKnown([]byte("k"), values)
	rnd := rand.New(rand.NewPCG(9, 10))
	for _, c := range []struct{ name, payload string }{
		{"prose-64KiB", `{"message":"` + strings.Repeat("Rotate the API key and the access token; never share a password. ", 1024) + `"}`},
		{"words-64KiB", `{"message":"` + prose(rnd, 65536) + `"}`},
	} {
		p := []byte(c.payload)
		for _, pass := range []struct {
			name string
			run  func()
		}{
			{"keywords", func() { s.keywords.rules(p, nil) }},
			{"gitleaks", func() { s.gitleaks(p) }},
			{"seeds", func() { seeds(p) }},
			{"known", func() { known.scan(p) }},
			{"all", func() { s.Scan(p, known) }},
		} {
			b.Run(c.name+"/"+pass.name, func(b *testing.B) {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				start := testkit.ThreadCPU()
				for b.Loop() {
					pass.run()
				}
				b.ReportMetric(float64(testkit.ThreadCPU()-start)/float64(b.N)/float64(len(p)), "cpu-ns/B")
			})
		}
	}
}

// pairedPerByte times before and after alternately, call by call, on this
// thread's CPU clock, and reports each one's CPU ns per byte of an n-byte
// input and their ratio.
func pairedPerByte(b *testing.B, n int, before, after func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var tb, ta time.Duration
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			t0 := testkit.ThreadCPU()
			before()
			t1 := testkit.ThreadCPU()
			after()
			tb, ta = tb+t1-t0, ta+testkit.ThreadCPU()-t1
		} else {
			t0 := testkit.ThreadCPU()
			after()
			t1 := testkit.ThreadCPU()
			before()
			ta, tb = ta+t1-t0, tb+testkit.ThreadCPU()-t1
		}
	}
	b.ReportMetric(float64(tb.Nanoseconds())/float64(b.N)/float64(n), "before-ns/B")
	b.ReportMetric(float64(ta.Nanoseconds())/float64(b.N)/float64(n), "after-ns/B")
	b.ReportMetric(float64(ta)/float64(tb), "ratio")
}

// BenchmarkTokensPaired compares in one run the known-value check's token
// walk (Known.tokens: a tight loop over bytes of no class) with the
// previous one (every byte through the class switch), both handing the
// same candidates to a try that only counts them.
func BenchmarkTokensPaired(b *testing.B) {
	previous := func(payload []byte, start, end int, try func(int, int) bool) {
		word, tok := start, start
		for i := start; i <= end; i++ {
			c := byte(' ')
			if i < end {
				c = payload[i]
			}
			class := classes[c]
			if class == 0 {
				continue
			}
			if i-tok >= MinKnownLen {
				try(tok, i)
			}
			if class == space && tok != word && i-word >= MinKnownLen {
				try(word, i)
			}
			tok = i + 1
			if class == space {
				word = i + 1
			}
		}
	}
	k := &Known{}
	rnd := rand.New(rand.NewPCG(5, 6))
	for _, c := range []struct{ name, payload string }{
		{"prose-64KiB", strings.Repeat("Rotate the API key and the access token; never share a password. ", 1024)},
		{"words-64KiB", prose(rnd, 65536)},
		{"x-64KiB", strings.Repeat("x", 65536)},
		{"ids-64KiB", strings.Repeat("id=AbCdEfGhIjKlMnOpQrSt&", 2850)},
	} {
		b.Run(c.name, func(b *testing.B) {
			text := []byte(c.payload)
			var nb, na int
			previous(text, 0, len(text), func(s, e int) bool { nb += e - s; return false })
			k.tokens(text, 0, len(text), func(s, e int) bool { na += e - s; return false })
			if nb != na {
				b.Fatalf("the two walks try different candidates: %d bytes, %d bytes", nb, na)
			}
			pairedPerByte(b, len(text), func() { previous(text, 0, len(text), func(int, int) bool { return false }) },
				func() { k.tokens(text, 0, len(text), func(int, int) bool { return false }) })
		})
	}
}
