// Package pattern matches strings against a regular expression with a
// length bound checked apart from it.
//
// A bound written into the expression (`^[a-z0-9_-]{1,64}$`) makes Go's
// regexp compile one copy of the class per repetition: each such pattern
// cost a few hundred KB and up to 2 ms at program start, in every binary and
// CLI command that links the package, and matched slower. Here the
// expression says which characters ("+" or "*") and the bound is a length
// test.
package pattern

import "regexp"

// Bounded is a compiled expression plus the byte length a match must have.
type Bounded struct {
	re       *regexp.Regexp
	min, max int
}

// MustCompile compiles expr (which should not repeat with {m,n} itself) for
// strings of min to max bytes. It panics on a bad expression, as
// regexp.MustCompile does, so it belongs in package-level variables.
func MustCompile(expr string, min, max int) *Bounded {
	return &Bounded{re: regexp.MustCompile(expr), min: min, max: max}
}

// MatchString reports whether s has an allowed length and matches.
func (b *Bounded) MatchString(s string) bool {
	return len(s) >= b.min && len(s) <= b.max && b.re.MatchString(s)
}

// String is the pattern as a person would read it, for error messages.
func (b *Bounded) String() string { return b.re.String() }
