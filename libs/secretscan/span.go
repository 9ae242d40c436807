package secretscan

import (
	"bytes"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// maxSpan bounds the match length (bytes) of a rule run on windows: a rule
// whose matches may be longer runs on the whole payload.
const maxSpan = 4096

// span is the longest match (in bytes) of re when every match of it holds
// one of keywords (ASCII case-insensitively), else 0. For such a rule, every
// match lies within span bytes of an occurrence of one of its keywords: the
// regexp need only run on windows around those (window.go). Conservative:
// a regexp this analysis cannot prove it of gets 0 (whole payload).
func span(re *regexp.Regexp, keywords []string) int {
	if len(keywords) == 0 {
		return 0
	}
	t, err := syntax.Parse(re.String(), syntax.Perl) // as regexp.Compile parses it
	if err != nil {
		return 0
	}
	n := maxLen(t)
	if n <= 0 || n > maxSpan || !mustHold(t, keywords) {
		return 0
	}
	return n
}

// maxLen is the longest text (bytes) t matches, -1 when unbounded.
func maxLen(t *syntax.Regexp) int {
	switch t.Op {
	case syntax.OpNoMatch, syntax.OpEmptyMatch, syntax.OpBeginLine, syntax.OpEndLine,
		syntax.OpBeginText, syntax.OpEndText, syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return 0
	case syntax.OpLiteral:
		n := 0
		for _, r := range t.Rune {
			n += runeBytes(r, t.Flags&syntax.FoldCase != 0)
		}
		return n
	case syntax.OpCharClass:
		n := 0
		for i := 1; i < len(t.Rune); i += 2 {
			n = max(n, runeBytes(t.Rune[i], false))
		}
		return n
	case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		return utf8.UTFMax
	case syntax.OpCapture, syntax.OpQuest:
		return maxLen(t.Sub[0])
	case syntax.OpStar, syntax.OpPlus:
		if maxLen(t.Sub[0]) == 0 {
			return 0
		}
		return -1
	case syntax.OpRepeat:
		c := maxLen(t.Sub[0])
		if c == 0 {
			return 0
		}
		if c < 0 || t.Max < 0 {
			return -1
		}
		return min(c*t.Max, maxSpan+1)
	case syntax.OpConcat:
		n := 0
		for _, s := range t.Sub {
			c := maxLen(s)
			if c < 0 {
				return -1
			}
			n = min(n+c, maxSpan+1)
		}
		return n
	case syntax.OpAlternate:
		n := 0
		for _, s := range t.Sub {
			c := maxLen(s)
			if c < 0 {
				return -1
			}
			n = max(n, c)
		}
		return n
	}
	return -1
}

// runeBytes is the longest UTF-8 encoding of r (of any rune it folds to).
func runeBytes(r rune, fold bool) int {
	n := utf8.RuneLen(r)
	if n < 0 {
		n = utf8.UTFMax
	}
	if fold {
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			n = max(n, utf8.RuneLen(f))
		}
	}
	return n
}

// maxExact bounds the sets of texts exact builds.
const maxExact = 256

// exact is every text t matches, ASCII-lowercased, when they are few (a
// literal, a small class, alternations and concatenations of those).
func exact(t *syntax.Regexp) ([]string, bool) {
	switch t.Op {
	case syntax.OpEmptyMatch, syntax.OpBeginLine, syntax.OpEndLine,
		syntax.OpBeginText, syntax.OpEndText, syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return []string{""}, true
	case syntax.OpLiteral:
		// Under (?i) a literal's k and s also match the Kelvin sign and the
		// long s, which the keyword walk does not see: a payload holding
		// one is scanned whole (window.go), so here they are left out.
		return []string{asciiLower(string(t.Rune))}, true
	case syntax.OpCharClass:
		var out []string
		for i := 0; i+1 < len(t.Rune); i += 2 {
			if int(t.Rune[i+1]-t.Rune[i]) >= maxExact-len(out) {
				return nil, false
			}
			for r := t.Rune[i]; r <= t.Rune[i+1]; r++ {
				out = append(out, asciiLower(string(r)))
			}
		}
		return dedupe(out), true
	case syntax.OpCapture:
		return exact(t.Sub[0])
	case syntax.OpQuest:
		s, ok := exact(t.Sub[0])
		return dedupe(append(s, "")), ok
	case syntax.OpRepeat:
		if t.Max < 0 || t.Max > 4 {
			return nil, false
		}
		s, ok := exact(t.Sub[0])
		if !ok {
			return nil, false
		}
		var out []string
		for n := t.Min; n <= t.Max; n++ {
			p := []string{""}
			for range n {
				if p = product(p, s); p == nil {
					return nil, false
				}
			}
			out = append(out, p...)
		}
		return dedupe(out), len(out) <= maxExact
	case syntax.OpConcat:
		p := []string{""}
		for _, c := range t.Sub {
			s, ok := exact(c)
			if !ok {
				return nil, false
			}
			if p = product(p, s); p == nil {
				return nil, false
			}
		}
		return p, true
	case syntax.OpAlternate:
		var out []string
		for _, c := range t.Sub {
			s, ok := exact(c)
			if !ok || len(out)+len(s) > maxExact {
				return nil, false
			}
			out = append(out, s...)
		}
		return dedupe(out), true
	}
	return nil, false
}

// mustHold reports whether every text t matches holds a keyword.
func mustHold(t *syntax.Regexp, keywords []string) bool {
	if s, ok := exact(t); ok {
		return allHold(s, keywords)
	}
	switch t.Op {
	case syntax.OpCapture, syntax.OpPlus:
		return mustHold(t.Sub[0], keywords)
	case syntax.OpRepeat:
		return t.Min >= 1 && mustHold(t.Sub[0], keywords)
	case syntax.OpAlternate:
		for _, c := range t.Sub {
			if !mustHold(c, keywords) {
				return false
			}
		}
		return true
	case syntax.OpConcat:
		// One part holds a keyword, or a run of consecutive parts of few
		// texts does (a keyword split between "A" and "KIA|SIA", as the
		// parser factors alternations).
		var run []string
		for _, c := range t.Sub {
			if mustHold(c, keywords) {
				return true
			}
			s, ok := exact(c)
			if !ok {
				run = nil
				continue
			}
			if run == nil {
				run = []string{""}
			}
			if run = product(run, s); run == nil {
				run = s
			}
			if allHold(run, keywords) {
				return true
			}
		}
	}
	return false
}

// product is every a followed by every b, nil past maxExact.
func product(a, b []string) []string {
	if len(a)*len(b) > maxExact {
		return nil
	}
	out := make([]string, 0, len(a)*len(b))
	for _, x := range a {
		for _, y := range b {
			out = append(out, x+y)
		}
	}
	return dedupe(out)
}

func allHold(texts, keywords []string) bool {
	for _, s := range texts {
		held := false
		for _, k := range keywords {
			if strings.Contains(s, asciiLower(k)) {
				held = true
				break
			}
		}
		if !held {
			return false
		}
	}
	return true
}

func dedupe(s []string) []string {
	seen := make(map[string]bool, len(s))
	out := s[:0]
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// asciiLower lowercases ASCII letters only, as the keyword walk does.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		b[i] = lower[c]
	}
	return string(b)
}

// anchor is, for a rule whose every match starts with one of keywords
// (after zero-width assertions), a regexp that tells whether a match may
// start at a keyword's occurrence p when run on the payload from the rune
// before p: re anchored there, after an optional rune (that rune gives \b
// its context). It may say yes where re has no match, never no where re
// has one. Nil for other rules.
func anchor(re *regexp.Regexp, keywords []string) *regexp.Regexp {
	t, err := syntax.Parse(re.String(), syntax.Perl)
	if err != nil {
		return nil
	}
	starts, ok := leading(t)
	if !ok || len(starts) == 0 {
		return nil
	}
	for _, s := range starts {
		if !slices.ContainsFunc(keywords, func(k string) bool { return strings.HasPrefix(s, asciiLower(k)) }) {
			return nil
		}
	}
	a, err := regexp.Compile(`\A(?s:.)?(?:` + re.String() + `)`)
	if err != nil {
		return nil
	}
	return a
}

// leading are texts (ASCII-lowercased) one of which starts every text t
// matches.
func leading(t *syntax.Regexp) ([]string, bool) {
	if s, ok := exact(t); ok {
		return s, true
	}
	switch t.Op {
	case syntax.OpCapture, syntax.OpPlus:
		return leading(t.Sub[0])
	case syntax.OpRepeat:
		if t.Min < 1 {
			return nil, false
		}
		return leading(t.Sub[0])
	case syntax.OpAlternate:
		var out []string
		for _, c := range t.Sub {
			s, ok := leading(c)
			if !ok || len(out)+len(s) > maxExact {
				return nil, false
			}
			out = append(out, s...)
		}
		return dedupe(out), true
	case syntax.OpConcat:
		run := []string{""}
		for _, c := range t.Sub {
			s, ok := exact(c)
			if !ok {
				if s, ok = leading(c); !ok {
					return run, true
				}
				if p := product(run, s); p != nil {
					run = p
				}
				return run, true
			}
			p := product(run, s)
			if p == nil {
				return run, true
			}
			run = p
		}
		return run, true
	}
	return nil, false
}

// needs are sets of texts each of which a match of re holds one of (ASCII
// case-insensitively): runs of parts of its top concatenation of a few
// texts, each of two bytes or more, not all holding a keyword (a rule runs
// only when one is in the payload). A payload lacking every text of one set has no match: the rule
// is skipped (curl-auth-header needs "-H" or "--header", not only "curl").
func needs(re *regexp.Regexp, keywords []string) [][]string {
	t, err := syntax.Parse(re.String(), syntax.Perl)
	if err != nil {
		return nil
	}
	parts := concatParts(t)
	if len(parts) < 2 {
		return nil
	}
	var out [][]string
	for j := range parts {
		// The texts of the parts from j on, while they are few.
		var run []string
		for _, c := range parts[j:] {
			s, ok := exact(c)
			if !ok {
				break
			}
			if run == nil {
				run = []string{""}
			}
			if p := product(run, s); p != nil && len(p) <= 8 {
				run = p
			} else {
				break
			}
			// Texts starting with whitespace are found everywhere in
			// prose: looking for them costs more than the rule they skip.
			if !allHold(run, keywords) && !slices.ContainsFunc(run, func(x string) bool { return len(x) < 2 || classes[x[0]] == space }) {
				out = append(out, run)
				break
			}
		}
	}
	return out
}

// concatParts are the parts of t's top concatenation, with a group's
// concatenation spliced into its place: a group changes no match, and
// gitleaks writes most rules as \b(…)(?:…|$), whose needed texts are
// inside the group (jwt's ".ey").
func concatParts(t *syntax.Regexp) []*syntax.Regexp {
	switch t.Op {
	case syntax.OpCapture:
		return concatParts(t.Sub[0])
	case syntax.OpConcat:
		var out []*syntax.Regexp
		for _, s := range t.Sub {
			if s.Op == syntax.OpCapture || s.Op == syntax.OpConcat {
				out = append(out, concatParts(s)...)
				continue
			}
			out = append(out, s)
		}
		return out
	}
	return []*syntax.Regexp{t}
}

// containsFold reports whether p holds s (lowercase) ASCII
// case-insensitively.
func containsFold(p []byte, s string) bool {
	first := []byte{s[0]}
	if u := s[0] - 'a' + 'A'; s[0] >= 'a' && s[0] <= 'z' {
		first = append(first, u)
	}
	for _, c := range first {
		for off := 0; ; {
			i := bytes.IndexByte(p[off:], c)
			if i < 0 {
				break
			}
			if hasLowerPrefix(p[off+i:], s) {
				return true
			}
			off += i + 1
		}
	}
	return false
}

// lazyRegexp is re compiled again on first use, from its source (nil for
// nil): a scanner keeps about a hundred anchors, and a payload names few
// of their rules, so holding them all compiled cost heap for nothing.
func lazyRegexp(re *regexp.Regexp) func() *regexp.Regexp {
	if re == nil {
		return nil
	}
	src := re.String()
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(src) })
}
