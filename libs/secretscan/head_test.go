package secretscan

import (
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestHeads checks the heads of shapes whose starts are known, and that a
// head never refuses a text the regexp matches there.
func TestHeads(t *testing.T) {
	for _, c := range []struct {
		re      string
		yes, no []string
	}{
		// twilio-api-key: case kept, 32 hex digits.
		{`SK[0-9a-fA-F]{32}`, []string{"SK0123456789abcdef0123456789ABCDEF"}, []string{"sk0123456789abcdef0123456789ABCDEF", "SK0123", "ask the team", "SK0123456789abcdef0123456789ABCDEg"}},
		// vault-service-token: two branches, the second's class folds to
		// runes outside ASCII (its length then unknown after 24).
		{`\b((?:hvs\.[\w-]{90,120}|s\.(?i:[a-z0-9]{24})))(?:[\x60'"\s;]|\\[nr]|$)`,
			[]string{"s.ABCDEFGHIJKLMNOPQRSTUVWX", "hvs." + strings.Repeat("a-", 45)},
			[]string{"s. the", "tasks. x", "s.ABCDEFGHIJKLMNOPQRSTUVW", "hvs.short"}},
		// (?i) letters in either case.
		{`(?i)ghp_[a-z]{4}`, []string{"GHP_abcd", "gHp_ZZZZ"}, []string{"ghq_abcd", "ghp_ab1d"}},
		// A class outside ASCII: its runes' bytes, at least one a rune ("xéé"
		// is 5 bytes: it may be three runes as far as bytes tell).
		{`x[é-ë]{3}y`, []string{"xéêëy", "xééé", "xéé"}, []string{"xeeey", "xé"}},
		// An optional part ends the head.
		{`ab?c`, []string{"ac", "abc", "a"}, []string{"bc"}},
		{`a[0-9]{0,3}c`, []string{"ac", "a1c", "a"}, []string{"bc"}},
		// A repeat past maxHeadLen is cut there.
		{`z[0-9]{100}`, []string{"z" + strings.Repeat("1", 63)}, []string{"z" + strings.Repeat("1", 62) + "x"}},
	} {
		hs := headsOf(regexp.MustCompile(c.re))
		if hs == nil {
			t.Errorf("%s: no heads", c.re)
			continue
		}
		for _, p := range c.yes {
			if !startsAny(hs, []byte(p)) {
				t.Errorf("%s: the heads refuse %q", c.re, p)
			}
		}
		for _, p := range c.no {
			if startsAny(hs, []byte(p)) {
				t.Errorf("%s: the heads take %q", c.re, p)
			}
		}
	}
	// Heads that say nothing: a match may start with any byte.
	for _, re := range []string{`.*x`, `a*b`, `(?:ab|cd|ef|gh|ij|kl|mn|op|qr)z`} {
		if hs := headsOf(regexp.MustCompile(re)); hs != nil {
			t.Errorf("%s: heads %v, want none", re, hs)
		}
	}
}

// TestHeadsHoldInEveryMatch: for each rule with heads, every match of its
// regexp, among texts generated from it and set in prose, starts with bytes
// one of its heads takes.
func TestHeadsHoldInEveryMatch(t *testing.T) {
	s := testScanner(t)
	rnd := rand.New(rand.NewPCG(9, 10))
	withHeads, checked := 0, 0
	for i, r := range s.rules {
		if s.heads[i] == nil {
			continue
		}
		withHeads++
		re, tree := parsed(t, s.sources[i])
		for range 20 {
			p := prose(rnd, 20) + " " + generate(rnd, tree) + " " + prose(rnd, 20)
			// The text as generated, then mutants: a letter's case
			// flipped, a rune beyond ASCII put in, a byte dropped.
			for k := range 4 {
				if k > 0 {
					p = mutate(rnd, p)
				}
				if slices.ContainsFunc(foldRunes, func(f string) bool { return strings.Contains(p, f) }) {
					continue // scanned whole, never windowed (window.go)
				}
				for _, m := range re.FindAllStringIndex(p, -1) {
					checked++
					if !startsAny(s.heads[i], []byte(p[m[0]:])) {
						t.Errorf("rule %s: its heads refuse the match %q", r.RuleID, p[m[0]:m[1]])
					}
				}
			}
		}
	}
	t.Logf("%d rules with heads; %d matches checked", withHeads, checked)
	if withHeads < 50 || checked < withHeads*40 {
		t.Fatalf("only %d rules with heads, %d matches checked", withHeads, checked)
	}
}

// mutate changes one thing in p: a letter's case, a rune beyond ASCII put
// in (2 to 4 bytes), or a byte dropped.
func mutate(rnd *rand.Rand, p string) string {
	if p == "" {
		return p
	}
	i := rnd.IntN(len(p))
	switch rnd.IntN(3) {
	case 0:
		if c := p[i]; c < utf8.RuneSelf {
			return p[:i] + string(rune(asciiFold(rune(c)))) + p[i+1:]
		}
		return p
	case 1:
		for i > 0 && !utf8.RuneStart(p[i]) {
			i--
		}
		return p[:i] + []string{"é", "中", "😀", "ß"}[rnd.IntN(4)] + p[i:]
	}
	return p[:i] + p[i+1:]
}
