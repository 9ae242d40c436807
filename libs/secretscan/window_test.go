package secretscan

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/zricethezav/gitleaks/v8/config"
	"github.com/zricethezav/gitleaks/v8/detect"
	"github.com/zricethezav/gitleaks/v8/report"
)

// TestFoldRunes checks foldRunes against every rune.
func TestFoldRunes(t *testing.T) {
	var want []string
	for r := rune(utf8.RuneSelf); r <= unicode.MaxRune; r++ {
		ascii := strings.IndexFunc(strings.ToLower(string(r)), func(c rune) bool { return c < utf8.RuneSelf }) >= 0
		for f := unicode.SimpleFold(r); f != r && !ascii; f = unicode.SimpleFold(f) {
			ascii = f < utf8.RuneSelf
		}
		if ascii && utf8.ValidRune(r) {
			want = append(want, string(r))
		}
	}
	if !slices.Equal(want, foldRunes) {
		t.Fatalf("runes folding to ASCII %q, foldRunes %q", want, foldRunes)
	}
}

// TestSpan checks the analysis on rules whose shape is known: the AWS key
// (keywords split by the parser's factoring of A(?:KIA|SIA…)), a prefixed
// token, and rules it must refuse (unbounded, a match without a keyword).
func TestSpan(t *testing.T) {
	s := testScanner(t)
	for _, c := range []struct {
		id               string
		windowed, anchor bool
	}{
		{"aws-access-token", true, true},
		{"github-pat", true, true},
		{"vault-service-token", true, true}, // \b before its keyword
		{"heroku-api-key-v2", true, true},
		{"heroku-api-key", true, false},    // the keyword after up to 50 characters
		{"curl-auth-header", false, false}, // unbounded
	} {
		i := slices.IndexFunc(s.rules, func(r config.Rule) bool { return r.RuleID == c.id })
		if i < 0 {
			t.Fatalf("no rule %s", c.id)
		}
		if got := s.span[i] > 0; got != c.windowed {
			t.Errorf("%s: windowed %v (span %d), want %v", c.id, got, s.span[i], c.windowed)
		}
		if got := s.anchors[i] != nil; got != c.anchor {
			t.Errorf("%s: anchored %v, want %v", c.id, got, c.anchor)
		}
	}
	for _, c := range []struct {
		re       string
		keywords []string
		want     int
	}{
		{`AKIA[A-Z2-7]{16}`, []string{"akia"}, 20},
		// (?i): k may be the Kelvin sign (3 bytes), \w holds it and the long s.
		{`(?i)\b(?:heroku)[\w.-]{0,20}(x)`, []string{"heroku"}, 8 + 20*3 + 1},
		{`x{0,3}(?:ab|cd)`, []string{"ab"}, 0},        // "cd" holds no keyword
		{`(?:ab)?[0-9]{5}`, []string{"ab"}, 0},        // the keyword is optional
		{`ab[0-9]+`, []string{"ab"}, 0},               // unbounded
		{`a(?:b|c)d`, []string{"abd", "acd"}, 3},      // keywords only in the product
		{`é{2}ab`, []string{"ab"}, 6},                 // bytes, not runes
		{`(?i)sk[0-9]{2}`, []string{"sk"}, 2 + 3 + 2}, // the long s is two bytes, the Kelvin sign three
	} {
		if got := span(regexp.MustCompile(c.re), c.keywords); got != c.want {
			t.Errorf("span(%s, %v) = %d, want %d", c.re, c.keywords, got, c.want)
		}
	}
	if n := popcount(&s.windowed); n < len(s.rules)/2 {
		t.Errorf("%d of %d rules windowed", n, len(s.rules))
	}
}

// TestWindowsMatchGitleaks compares the scanner's gitleaks findings with
// gitleaks' own detector of every rule, run on the whole payload, on
// payloads made of texts each rule's regexp matches (generated from it):
// alone; at the payload's start and end; far from other occurrences of the
// rule's keywords; two at distances around a window's reach (windows that
// just meet or not); after a word character or a multi-byte rune (the \b
// and rune bounds at a window's edge). The findings must be the same rules
// and values, and most rules must have found something.
func TestWindowsMatchGitleaks(t *testing.T) {
	s := testScanner(t)
	ref := detect.NewDetector(s.configOf(s.all))
	ref.IgnoreGitleaksAllow = true
	rnd := rand.New(rand.NewPCG(1, 2))
	var found, windowedRuns, payloads int
	for i, r := range s.rules {
		if !s.windowed.has(i) {
			continue
		}
		tree, err := syntax.Parse(r.Regex.String(), syntax.Perl)
		if err != nil {
			t.Fatal(err)
		}
		l := s.span[i]
		kw := r.Keywords[rnd.IntN(len(r.Keywords))]
		f := min(l, 128) // payloads of a rule of a long reach run whole
		filler := func(n int) string { return prose(rnd, n/l*f) }
		foundRule := false
		for range 1 {
			a, b := generate(rnd, tree), generate(rnd, tree)
			cases := []string{
				`{"v":"` + a + `"}`,
				a + filler(4*l),
				filler(4*l) + a,
				filler(6*l) + a + filler(4*l) + kw + filler(6*l) + kw + b + filler(5*l),
				filler(6*l) + "é’x" + a + "z" + filler(6*l),
			}
			for _, gap := range []int{l - 2, l + 3, 2*l + 2*windowMargin - 1, 2*l + 2*windowMargin + 7} {
				cases = append(cases, filler(6*l)+a+strings.Repeat("é", max(gap, 0)/2)+b+filler(6*l))
			}
			for _, p := range cases {
				payloads++
				want := pairs(ref.DetectBytes([]byte(p)))
				got := pairs(s.gitleaks([]byte(p)))
				if !slices.Equal(got, want) {
					t.Errorf("rule %s, payload of %d bytes: scanner found %q, gitleaks %q", r.RuleID, len(p), got, want)
				}
				if len(want) > 0 {
					foundRule = true
				}
				var hits []hit
				s.keywords.rules([]byte(p), &hits)
				covered := 0
				for _, w := range s.windows(i, []byte(p), hits, nil) {
					covered += w.end - w.start
				}
				if 2*covered < len(p) {
					windowedRuns++
				}
			}
		}
		if foundRule {
			found++
		}
	}
	t.Logf("%d windowed rules found something, %d of %d payloads ran on windows", found, windowedRuns, payloads)
	if n := popcount(&s.windowed); found < n*3/4 || windowedRuns < payloads/3 {
		t.Fatalf("only %d of %d windowed rules found their generated texts, %d of %d payloads ran on windows", found, n, windowedRuns, payloads)
	}
}

// TestGitleaksAllowIgnored: a payload cannot exempt its own secret by
// holding gitleaks' "gitleaks:allow" marker.
func TestGitleaksAllowIgnored(t *testing.T) {
	p := []byte(`{"a":"AKIAZ3MQXP7R2HKW5Y4N","b":"gitleaks:allow"}`)
	if got := pairs(testScanner(t).gitleaks(p)); len(got) != 1 || !strings.HasPrefix(got[0], "aws-access-token ") {
		t.Fatalf("found %q", got)
	}
}

// TestFoldRuneFallsBack: a payload holding the Kelvin sign is scanned by
// gitleaks' own walk (its (?i) rules match it as "k").
func TestFoldRuneFallsBack(t *testing.T) {
	s := testScanner(t)
	p := []byte("{\"v\":\"x \u212a\"}")
	set := s.keywords.rules(p, nil)
	if !set.has(foldBit) {
		t.Fatal("the Kelvin sign was not flagged")
	}
}

func testScanner(t *testing.T) *Scanner {
	t.Helper()
	s, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func popcount(s *ruleSet) int {
	n := 0
	for i := range maxRules {
		if s.has(i) {
			n++
		}
	}
	return n
}

// pairs are findings as sorted "rule value" texts.
func pairs(fs []report.Finding) []string {
	out := make([]string, 0, len(fs))
	for _, f := range fs {
		out = append(out, fmt.Sprintf("%s %q", f.RuleID, f.Secret))
	}
	slices.Sort(out)
	return out
}

var words = strings.Fields("the a of rotate key token password access api secret config value user run these tests runs its " +
	"is not never share ask task bearer header s. é ’ über naïve 42 0x1f _id")

// prose is n bytes or so of words, some of them rule keywords.
func prose(rnd *rand.Rand, n int) string {
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(words[rnd.IntN(len(words))])
		b.WriteByte(" \n.,:="[rnd.IntN(6)])
	}
	return b.String()
}

// parsed is a rule's regexp compiled and parsed (for generate).
func parsed(t *testing.T, src string) (*regexp.Regexp, *syntax.Regexp) {
	t.Helper()
	tree, err := syntax.Parse(src, syntax.Perl)
	if err != nil {
		t.Fatal(err)
	}
	return regexp.MustCompile(src), tree
}

// generate is a text t matches (most of the time: assertions are not
// checked), repetitions kept short.
func generate(rnd *rand.Rand, t *syntax.Regexp) string {
	var b strings.Builder
	gen(rnd, t, &b)
	return b.String()
}

func gen(rnd *rand.Rand, t *syntax.Regexp, b *strings.Builder) {
	switch t.Op {
	case syntax.OpLiteral:
		for _, r := range t.Rune {
			if t.Flags&syntax.FoldCase != 0 && r < utf8.RuneSelf && rnd.IntN(2) == 0 {
				r = unicode.SimpleFold(r)
			}
			b.WriteRune(r)
		}
	case syntax.OpCharClass:
		b.WriteRune(classRune(rnd, t.Rune))
	case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		b.WriteByte(byte('!' + rnd.IntN(94)))
	case syntax.OpCapture:
		gen(rnd, t.Sub[0], b)
	case syntax.OpConcat:
		for _, s := range t.Sub {
			gen(rnd, s, b)
		}
	case syntax.OpAlternate:
		gen(rnd, t.Sub[rnd.IntN(len(t.Sub))], b)
	case syntax.OpQuest, syntax.OpStar, syntax.OpPlus, syntax.OpRepeat:
		lo, hi := 0, 1
		switch t.Op {
		case syntax.OpStar:
			hi = 3
		case syntax.OpPlus:
			lo, hi = 1, 3
		case syntax.OpRepeat:
			lo, hi = t.Min, t.Max
			if hi < 0 {
				hi = lo + 3
			}
		}
		for range lo + rnd.IntN(hi-lo+1) {
			gen(rnd, t.Sub[0], b)
		}
	}
}

// classRune picks a rune of a class, printable ASCII when the class has some.
func classRune(rnd *rand.Rand, ranges []rune) rune {
	var ascii []rune
	for i := 0; i+1 < len(ranges); i += 2 {
		for r := max(ranges[i], ' '); r <= min(ranges[i+1], '~'); r++ {
			ascii = append(ascii, r)
		}
	}
	if len(ascii) > 0 {
		return ascii[rnd.IntN(len(ascii))]
	}
	i := 2 * rnd.IntN(len(ranges)/2)
	r := ranges[i] + rune(rnd.IntN(int(min(ranges[i+1]-ranges[i], 1000))+1))
	if !utf8.ValidRune(r) {
		return ranges[i]
	}
	return r
}

// A rule whose match needs text besides its keyword (curl's rules: "-H" or
// "--header", "-u" or "--user") is skipped where that text is absent, and
// found as gitleaks finds it where it is present.
func TestNeeds(t *testing.T) {
	s := testScanner(t)
	i := slices.IndexFunc(s.rules, func(r config.Rule) bool { return r.RuleID == "curl-auth-header" })
	if i < 0 || len(s.needs[i]) == 0 {
		t.Fatalf("curl-auth-header needs %v", s.needs[max(i, 0)])
	}
	ref := detect.NewDetector(s.configOf(s.all))
	ref.IgnoreGitleaksAllow = true
	found := 0
	for _, p := range []string{
		`{"m":"run curl to fetch it, then curl again"}`,
		`{"m":"curl -H \"Authorization: Bearer R7dK2mQx9LpV4sTz8NwB\" https://api.example.com"}`,
		`{"m":"curl --header \"X-Api-Key: R7dK2mQx9LpV4sTz8NwB\" https://x"}`,
		`{"m":"curl -u admin:R7dK2mQx9LpV4sTz8NwB https://x"}`,
		"curl --HEADER \"Authorization: Token R7dK2mQx9LpV4sTz8NwB\" x",
	} {
		want, got := pairs(ref.DetectBytes([]byte(p))), pairs(s.gitleaks([]byte(p)))
		if !slices.Equal(got, want) {
			t.Errorf("%s: scanner %q, gitleaks %q", p, got, want)
		}
		found += len(want)
	}
	if found < 1 {
		t.Fatalf("gitleaks found %d secrets in the curl commands", found)
	}
}

// Needed texts are exact: every text generated from any rule's regexp
// that the regexp matches holds a text of each of its needs, so a rule is
// never skipped where it would match. jwt needs ".ey" (inside its group).
func TestNeedsHoldInEveryMatch(t *testing.T) {
	s := testScanner(t)
	rnd := rand.New(rand.NewPCG(7, 8))
	withNeeds, checked := 0, 0
	for i, r := range s.rules {
		if len(s.needs[i]) > 0 {
			withNeeds++
		}
		re, tree := parsed(t, s.sources[i])
		for range 20 {
			g := generate(rnd, tree)
			if !re.MatchString(g) {
				continue
			}
			checked++
			if !s.holdsNeeds(i, []byte(g)) {
				t.Errorf("rule %s: %q matches but lacks a needed text of %q", r.RuleID, g, s.needs[i])
			}
		}
	}
	j := slices.IndexFunc(s.rules, func(r config.Rule) bool { return r.RuleID == "jwt" })
	if j < 0 || !slices.ContainsFunc(s.needs[j], func(set []string) bool { return slices.Contains(set, ".ey") }) {
		t.Errorf("jwt needs %q, want \".ey\" among them", s.needs[max(j, 0)])
	}
	t.Logf("%d rules with needed texts; %d generated matches checked", withNeeds, checked)
	if checked < len(s.rules)*5 {
		t.Fatalf("only %d generated texts matched their rule", checked)
	}
}
