package secretscan

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zricethezav/gitleaks/v8/report"

	"github.com/mcpbus/mcpbus/libs/testkit/threadcpu"
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

// BenchmarkPrefilterPaired compares in one run the keyword walk (the walk
// without known values: each position's four bytes tested in a bitset
// before keywords are compared) with the walk comparing the keywords of
// every pair that starts one (before the bitsets).
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
			b.ReportMetric(float64(after.Nanoseconds())/float64(b.N)/float64(len(text)), "bitset-ns/B")
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
// prose: the keyword walk alone, the walk with the known-value check (64
// values of lengths 8 to 64: every token of 8 to 64 bytes is fingerprinted,
// once per distinct text), gitleaks' rules (a keyword walk of their own
// included), the nkey seed search, and the whole scan.
func BenchmarkPasses(b *testing.B) {
	s, known, payloads := pairedSetup(b)
	rnd := rand.New(rand.NewPCG(9, 10))
	for _, c := range []struct{ name, payload string }{
		payloads[0], // the 64 KiB prose
		{"words-64KiB", `{"message":"` + prose(rnd, 65536) + `"}`},
	} {
		p := []byte(c.payload)
		for _, pass := range []struct {
			name string
			run  func()
		}{
			{"keywords", func() { s.keywords.rules(p, nil) }},
			{"walk", func() { var hits []hit; s.keywords.walk(p, &hits, known) }},
			{"gitleaks", func() { s.gitleaks(p) }},
			{"seeds", func() { seeds(p) }},
			{"all", func() { s.Scan(p, known) }},
		} {
			b.Run(c.name+"/"+pass.name, func(b *testing.B) {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				start := threadcpu.Now()
				for b.Loop() {
					pass.run()
				}
				b.ReportMetric(float64(threadcpu.Now()-start)/float64(b.N)/float64(len(p)), "cpu-ns/B")
			})
		}
	}
}

// pairedPerByte times before and after alternately, call by call, on this
// thread's CPU clock, and reports each one's CPU ns per byte of an n-byte
// input and their ratio. A call on a small input is timed in a batch of
// calls of ~64 KiB in all: the clock's own cost would swamp it.
func pairedPerByte(b *testing.B, n int, before, after func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	batch := max(1, 65536/max(n, 1))
	timed := func(f func()) time.Duration {
		t0 := threadcpu.Now()
		for range batch {
			f()
		}
		return threadcpu.Now() - t0
	}
	var tb, ta time.Duration
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			tb += timed(before)
			ta += timed(after)
		} else {
			ta += timed(after)
			tb += timed(before)
		}
	}
	calls := float64(b.N * batch)
	b.ReportMetric(float64(tb.Nanoseconds())/calls/float64(n), "before-ns/B")
	b.ReportMetric(float64(ta.Nanoseconds())/calls/float64(n), "after-ns/B")
	b.ReportMetric(float64(ta)/float64(tb), "ratio")
}

// BenchmarkWalkPaired compares in one run, call by call, order alternating,
// on this thread's CPU clock, the walk (keywords and known values in one
// loop over the bytes) with the two separate passes it replaced, with the
// 64 known values of BenchmarkPasses (every length from 8 to 64), and on
// the prose also with 3 values of 24 to 40 bytes; words-64KiB is
// BenchmarkPasses' text of distinct words (a long word every few).
func BenchmarkWalkPaired(b *testing.B) {
	s, known, payloads := pairedSetup(b)
	old := newPairPrefilter(s.keywords)
	// A deployment's set: a few values of a few lengths, none as short as
	// most words.
	few := NewKnown([]byte("k"), []string{strings.Repeat("a", 24), strings.Repeat("b", 32), strings.Repeat("c", 40)})
	payloads = append(payloads, struct{ name, payload string }{"prose-64KiB-3-values", payloads[0].payload},
		struct{ name, payload string }{"words-64KiB", `{"message":"` + prose(rand.New(rand.NewPCG(9, 10)), 65536) + `"}`},
		struct{ name, payload string }{"one-word-64KiB", `{"content":[{"type":"text","text":"` + strings.Repeat("x", 65536) + `"}]}`})
	for _, c := range payloads {
		b.Run(c.name, func(b *testing.B) {
			p := []byte(c.payload)
			known := known
			if strings.HasSuffix(c.name, "-3-values") {
				known = few
			}
			pairedPerByte(b, len(p), func() {
				var hits []hit
				old.rules(p, &hits)
				separateKnown(known, p)
			}, func() {
				var hits []hit
				s.keywords.walk(p, &hits, known)
			})
		})
	}
}

// BenchmarkScanPaired compares in one run, as BenchmarkWalkPaired, the
// whole Scan with Scan as it was, its passes separate.
func BenchmarkScanPaired(b *testing.B) {
	s, known, payloads := pairedSetup(b)
	old := newPairPrefilter(s.keywords)
	for _, c := range payloads {
		b.Run(c.name, func(b *testing.B) {
			p := []byte(c.payload)
			if !slices.Equal(s.Scan(p, known), separateScan(s, old, p, known)) {
				b.Fatal("the walk and the separate passes find different secrets")
			}
			pairedPerByte(b, len(p), func() { separateScan(s, old, p, known) }, func() { s.Scan(p, known) })
		})
	}
}

// pairedSetup is a scanner, BenchmarkPasses' 64 known values, and the
// paired benchmarks' payloads: prose of 64 KiB and 1 KiB, a short message,
// and a message holding an AWS key.
func pairedSetup(b *testing.B) (*Scanner, *Known, []struct{ name, payload string }) {
	s, err := New()
	if err != nil {
		b.Fatal(err)
	}
	var values []string
	for i := range 64 {
		values = append(values, strings.Repeat("k", 8+i*56/63))
	}
	const sentence = "Rotate the API key and the access token; never share a password. "
	return s, NewKnown([]byte("k"), values), []struct{ name, payload string }{
		{"prose-64KiB", `{"message":"` + strings.Repeat(sentence, 1024) + `"}`},
		{"prose-1KiB", `{"message":"` + strings.Repeat(sentence, 16) + `"}`},
		{"message-20B", `{"city":"Paris, FR"}`},
		{"aws-key-1KiB", `{"message":"` + strings.Repeat("lorem ipsum dolor sit amet ", 36) + ` AKIAZ3MQXP7R2HKW5Y4N"}`},
	}
}
