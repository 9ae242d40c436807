package secretscan

import (
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/zricethezav/gitleaks/v8/config"
	"github.com/zricethezav/gitleaks/v8/detect"
)

// TestRuns checks the required runs of shapes whose runs are known, and
// the look for one in a payload both ways.
func TestRuns(t *testing.T) {
	for _, c := range []struct {
		re      string
		n       int
		yes, no []string
	}{
		// twilio-api-key: 32 hex digits.
		{`SK[0-9a-fA-F]{32}`, 32, []string{"x SK" + strings.Repeat("aF3", 10) + "0d y", strings.Repeat("f", 32)},
			[]string{"ask the team about the tasks", strings.Repeat("f", 31) + " " + strings.Repeat("f", 31), strings.Repeat("0123456789abcdeg", 4)}},
		// vault-service-token: two branches, the shorter run of the union
		// of their classes; (?i) folds its letters to runes beyond ASCII,
		// whose bytes count.
		{`\b((?:hvs\.[\w-]{90,120}|s\.(?i:[a-z0-9]{24})))(?:[\x60'"\s;]|\\[nr]|$)`, 24,
			[]string{"s.ABCDEFGHIJKLMNOPQRSTUVWX", "s." + strings.Repeat("ſ", 12), "hvs." + strings.Repeat("a-", 12)},
			[]string{"tasks. x", "s.ABCDEFGHIJKLMNOPQRSTUVW.x", strings.Repeat("abcdefghijk ", 10)}},
		// A class beyond ASCII: its runes' bytes.
		{`x[^\s"]{20,}y`, 20, []string{"é" + strings.Repeat("中", 7)}, []string{"ééééé ééééé ééééé"}},
		// A repeat of a repeat.
		{`(?:[0-9]{4}){5}`, 20, []string{strings.Repeat("7", 20)}, []string{strings.Repeat("7", 19)}},
		// The longest of a concatenation's runs.
		{`[a-z]{16}-[0-9]{30}`, 30, []string{strings.Repeat("1", 30)}, []string{strings.Repeat("a", 29)}},
		// The run at the payload's end, after a shorter one.
		{`[a-z]{16}`, 16, []string{strings.Repeat("b", 15) + "." + strings.Repeat("b", 16)}, []string{"." + strings.Repeat("b", 15)}},
	} {
		r := requiredRun(regexp.MustCompile(c.re))
		r.share(nil)
		if r.n != c.n {
			t.Errorf("%s: a run of %d, want %d", c.re, r.n, c.n)
			continue
		}
		for _, p := range c.yes {
			if !r.holds([]byte(p)) {
				t.Errorf("%s: %q holds no run", c.re, p)
			}
		}
		for _, p := range c.no {
			if r.holds([]byte(p)) {
				t.Errorf("%s: %q holds a run", c.re, p)
			}
		}
	}
	// No run: too short, a class with a space, an optional part, a branch
	// without one.
	for _, re := range []string{`[a-z]{15}`, `[^"]{40}`, `(?:[a-z]{40})?`, `[a-z]{0,40}`, `x(?:[a-z]{40}|y)`, `.{40}`} {
		if r := requiredRun(regexp.MustCompile(re)); r.n != 0 {
			t.Errorf("%s: a run of %d, want none", re, r.n)
		}
	}
}

// TestRunHoldsInEveryMatch: for each rule with a required run, every match
// of its regexp, among texts generated from it and set in prose (then
// mutated: a letter's case flipped, a rune beyond ASCII put in, a byte
// dropped), holds the run; and texts that hold no run are those the rule
// is skipped on (TestWindowsMatchGitleaks and TestScanMatchesSeparatePasses
// compare whole scans with gitleaks').
func TestRunHoldsInEveryMatch(t *testing.T) {
	s := testScanner(t)
	rnd := rand.New(rand.NewPCG(11, 12))
	withRuns, checked, tight := 0, 0, 0
	for i, r := range s.rules {
		run := s.runs[i]
		if run.n == 0 {
			continue
		}
		withRuns++
		re, tree := parsed(t, s.sources[i])
		shortest := false // some match holds no run one byte longer
		longer := run
		longer.n++
		for range 20 {
			p := prose(rnd, 20) + " " + generate(rnd, tree) + " " + prose(rnd, 20)
			for k := range 4 {
				if k > 0 {
					p = mutate(rnd, p)
				}
				for _, m := range re.FindAllStringIndex(p, -1) {
					checked++
					if !run.holds([]byte(p[m[0]:m[1]])) {
						t.Errorf("rule %s: the match %q holds no run of %d", r.RuleID, p[m[0]:m[1]], run.n)
					}
					shortest = shortest || !longer.holds([]byte(p[m[0]:m[1]]))
				}
			}
		}
		if shortest {
			tight++
		}
	}
	t.Logf("%d rules with runs (%d met with a match of the run's length); %d matches checked", withRuns, tight, checked)
	if withRuns < 150 || checked < withRuns*40 || tight < withRuns/2 {
		t.Fatalf("%d rules with runs, %d matches checked, %d met with a match of the run's length", withRuns, checked, tight)
	}
}

// A payload without the run of a rule's class skips the rule: the
// varied sentences' "sk" and "s." make no windows for twilio's and vault's
// rules; a key in the same text is found.
func TestRunSkipsRule(t *testing.T) {
	s := testScanner(t)
	rnd := rand.New(rand.NewPCG(13, 14))
	text := strings.Repeat("ask the tasks. risk it, tasks. ", 64) + prose(rnd, 2048)
	key := "SKe3b0c44298fc1c149afbf4c8996fb924"
	for _, c := range []struct {
		p    string
		want bool
	}{{text, false}, {text + key + " " + text, true}} {
		p := []byte(`{"m":"` + c.p + `"}`)
		var hits []hit
		set := s.keywords.rules(p, &hits)
		i := slices.IndexFunc(s.rules, func(r config.Rule) bool { return r.RuleID == "twilio-api-key" })
		if !set.has(i) {
			t.Fatalf("no twilio keyword in the text")
		}
		if got := s.runs[i].holds(p); got != c.want {
			t.Errorf("twilio's run held: %v, want %v", got, c.want)
		}
		found := slices.Contains(Rules(s.Scan(p, nil)), "twilio-api-key")
		if found != c.want {
			t.Errorf("twilio-api-key found: %v, want %v", found, c.want)
		}
	}
}

// TestRunsMatchGitleaks: for each rule with a required run, texts
// generated from its regexp, alone, in prose among many of its keywords
// (the run looked for in the whole payload), and mutated: the scanner's
// findings equal those of one gitleaks detector of every rule.
func TestRunsMatchGitleaks(t *testing.T) {
	s := testScanner(t)
	ref := detect.NewDetector(s.configOf(s.all))
	ref.IgnoreGitleaksAllow = true
	rnd := rand.New(rand.NewPCG(17, 18))
	found, payloads := 0, 0
	for i, r := range s.rules {
		if s.runs[i].n == 0 {
			continue
		}
		_, tree := parsed(t, s.sources[i])
		kw := r.Keywords[rnd.IntN(len(r.Keywords))]
		many := strings.Repeat(kw+" "+prose(rnd, 8)+" ", 40)
		for range 2 {
			g := generate(rnd, tree)
			for _, p := range []string{g, many + g + " " + many, mutate(rnd, prose(rnd, 30)+" "+g+" "+prose(rnd, 30)), many + mutate(rnd, g)} {
				payloads++
				want := pairs(ref.DetectBytes([]byte(p)))
				if got := pairs(s.gitleaks([]byte(p))); !slices.Equal(got, want) {
					t.Errorf("rule %s, payload of %d bytes: scanner found %q, gitleaks %q", r.RuleID, len(p), got, want)
				}
				if len(want) > 0 {
					found++
				}
			}
		}
	}
	t.Logf("%d of %d payloads had findings", found, payloads)
	if found < payloads/3 {
		t.Fatalf("only %d of %d payloads had findings", found, payloads)
	}
}
