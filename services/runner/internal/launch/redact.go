package launch

import (
	"sort"
	"strings"
)

// Redacted replaces a secret value in a logged stderr line.
const Redacted = "[REDACTED]"

// minSecretLen is the shortest value redacted: shorter ones ("1", "yes") would
// blank out ordinary output without protecting anything.
const minSecretLen = 4

// redactor replaces known secret values in lines. It is the only place a
// launch keeps them, for as long as the child's stderr is read.
type redactor struct {
	secrets []string // distinct, longest first
}

// newRedactor keeps the values of secrets worth redacting; nil when none is.
// A multi-line value (a PEM key from a keyfile) adds each of its lines too,
// since stderr is redacted one line at a time.
func newRedactor(secrets []string) *redactor {
	seen := map[string]bool{}
	var keep []string
	add := func(s string) {
		if len(s) >= minSecretLen && !seen[s] {
			seen[s] = true
			keep = append(keep, s)
		}
	}
	for _, s := range secrets {
		add(s)
		if strings.ContainsAny(s, "\r\n") {
			for _, line := range strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' }) {
				add(strings.TrimSpace(line))
			}
		}
	}
	if len(keep) == 0 {
		return nil
	}
	sort.SliceStable(keep, func(i, j int) bool { return len(keep[i]) > len(keep[j]) })
	return &redactor{secrets: keep}
}

// redact returns line with every occurrence of every secret replaced by
// Redacted; overlapping or adjacent occurrences become one marker.
func (r *redactor) redact(line string) string {
	if r == nil {
		return line
	}
	var hidden []bool
	for _, s := range r.secrets {
		for from := 0; ; {
			i := strings.Index(line[from:], s)
			if i < 0 {
				break
			}
			if hidden == nil {
				hidden = make([]bool, len(line))
			}
			start := from + i
			for j := start; j < start+len(s); j++ {
				hidden[j] = true
			}
			from = start + 1 // overlapping occurrences too
		}
	}
	if hidden == nil {
		return line
	}
	var b strings.Builder
	b.Grow(len(line))
	for i := 0; i < len(line); {
		if !hidden[i] {
			b.WriteByte(line[i])
			i++
			continue
		}
		b.WriteString(Redacted)
		for i < len(line) && hidden[i] {
			i++
		}
	}
	return b.String()
}

// wrap returns onLine behind the redactor (onLine itself when there is nothing to redact).
func (r *redactor) wrap(onLine func(string)) func(string) {
	if r == nil || onLine == nil {
		return onLine
	}
	return func(line string) { onLine(r.redact(line)) }
}

// Redactor hides known secret values in text other than stderr lines (the
// tool arguments and results an operator opted to record on traces).
type Redactor struct{ r *redactor }

// NewRedactor keeps the values of secrets worth redacting.
func NewRedactor(secrets []string) Redactor { return Redactor{newRedactor(secrets)} }

// Redact returns s with every known secret value replaced by Redacted.
func (r Redactor) Redact(s string) string { return r.r.redact(s) }
