package secretscan

import (
	"regexp"
	"regexp/syntax"
)

// Required runs: most rules' matches hold a long repeat of one class (the
// secret's body: twilio-api-key's `[0-9a-fA-F]{32}`, vault-service-token's
// `[a-z0-9]{24}` or `[\w-]{90,120}`), and prose never has 24 letters and
// digits in a row. A payload without such a run of bytes holds no match of
// the rule, which is then skipped, as for a missing needed text (span.go):
// no windows are made around its keywords, no regexp runs. In the varied
// sentences of BenchmarkScan the keywords of two such rules ("sk" in
// "ask", "s." ending a sentence) occur ~1,600 times in 64 KiB, and their
// windows (a head compared at each, sorted and merged) were a sixth of the
// scan.

// minRun is the shortest run worth looking for: words of prose reach 13
// letters ("configuration"), and a run found costs the look for nothing.
const minRun = 16

// classRun is a run of n bytes or more of set that every match of a rule
// holds (n 0: none known). A class with runes beyond ASCII has every byte
// from 0x80 in set (a rune of it is one or more of those bytes); under
// (?i) the parser has already put each letter's other cases in the class.
type classRun struct {
	set byteSet
	n   int
	in  *[256]bool // set as a table (New shares equal ones: 27 classes among 193 runs)
}

// requiredRun is a run every match of re holds, the longest found, when it
// is minRun bytes or more and its class has no space (prose is full of
// runs of a class that has); else none. Its table is made by share.
func requiredRun(re *regexp.Regexp) classRun {
	t, err := syntax.Parse(re.String(), syntax.Perl) // as regexp.Compile parses it
	if err != nil {
		return classRun{}
	}
	if r := runOf(t); r.n >= minRun {
		return r
	}
	return classRun{}
}

// share gives r its table, tables' of its class if there is one (else a
// new one, kept in tables unless nil). A table: 0.75x the look's time of
// the set's shifts and masks on the varied sentences (its loads are where
// it goes back).
func (r *classRun) share(tables map[byteSet]*[256]bool) {
	if r.n == 0 {
		return
	}
	if t, ok := tables[r.set]; ok {
		r.in = t
		return
	}
	r.in = new([256]bool)
	for c := range 256 {
		r.in[c] = r.set.has(byte(c))
	}
	if tables != nil {
		tables[r.set] = r.in
	}
}

// runOf is a run of a class without a space that every text t matches
// holds, the longest of those this analysis finds (n 0: none).
func runOf(t *syntax.Regexp) classRun {
	if r, ok := pure(t); ok {
		return r
	}
	switch t.Op {
	case syntax.OpCapture:
		return runOf(t.Sub[0])
	case syntax.OpPlus:
		return runOf(t.Sub[0])
	case syntax.OpRepeat:
		if t.Min < 1 {
			return classRun{}
		}
		return runOf(t.Sub[0]) // a match holds one of the repeated part's
	case syntax.OpConcat:
		var best classRun
		for _, s := range t.Sub {
			if r := runOf(s); r.n > best.n {
				best = r
			}
		}
		return best
	case syntax.OpAlternate:
		// Every branch's match holds a run of its own: together, a run of
		// the classes' union as long as the shortest.
		var out classRun
		for k, s := range t.Sub {
			r := runOf(s)
			if r.n == 0 {
				return classRun{}
			}
			for j := range out.set {
				out.set[j] |= r.set[j]
			}
			if k == 0 || r.n < out.n {
				out.n = r.n
			}
		}
		if out.set.has(' ') {
			return classRun{}
		}
		return out
	}
	return classRun{}
}

// pure reports whether every text t matches is wholly of one class
// without a space, and of at least n bytes: a class, a repeat of one.
func pure(t *syntax.Regexp) (classRun, bool) {
	switch t.Op {
	case syntax.OpCharClass:
		s, _ := classSet(t.Rune)
		if s.has(' ') {
			return classRun{}, false
		}
		return classRun{set: s, n: 1}, true
	case syntax.OpCapture:
		return pure(t.Sub[0])
	case syntax.OpPlus, syntax.OpRepeat:
		lo := 1
		if t.Op == syntax.OpRepeat {
			lo = t.Min
		}
		r, ok := pure(t.Sub[0])
		if !ok || lo < 1 {
			return classRun{}, false
		}
		r.n = min(r.n*lo, maxSpan+1)
		return r, true
	}
	return classRun{}, false
}

// holds reports whether p has n consecutive bytes of the run's class (true
// for no run). It looks at the last byte of each place a run could be and
// goes back only from a byte of the class, so most of prose is read one
// byte in n.
func (r *classRun) holds(p []byte) bool {
	if r.n == 0 {
		return true
	}
	// No run starts before i; the bytes from i up to known are of the class.
	i, known := 0, -1
	for i+r.n <= len(p) {
		j := i + r.n - 1
		if !r.in[p[j]] {
			i = j + 1
			continue
		}
		k := j - 1
		for k > known && k >= i && r.in[p[k]] {
			k--
		}
		if k < i || k <= known {
			return true
		}
		i, known = k+1, j
	}
	return false
}
