package pattern

import (
	"regexp"
	"strings"
	"testing"
)

// The bounded form accepts exactly what the {m,n} expression it replaces
// accepts.
func TestSameAsRepetition(t *testing.T) {
	cases := []struct {
		old      string
		expr     string
		min, max int
	}{
		{`^[a-z0-9_-]{1,64}$`, `^[a-z0-9_-]+$`, 1, 64},
		{`^[A-Za-z0-9][A-Za-z0-9.+_-]{0,127}$`, `^[A-Za-z0-9][A-Za-z0-9.+_-]*$`, 1, 128},
	}
	inputs := []string{"", "a", "a-b_c", "A", "a b", "-", ".x", "x.", "é",
		strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("a", 65),
		strings.Repeat("a", 127), strings.Repeat("a", 128), strings.Repeat("a", 129)}
	for _, c := range cases {
		old, b := regexp.MustCompile(c.old), MustCompile(c.expr, c.min, c.max)
		for _, in := range inputs {
			if got, want := b.MatchString(in), old.MatchString(in); got != want {
				t.Errorf("%s on %q (%d bytes): %v, the repetition says %v", c.expr, in, len(in), got, want)
			}
		}
	}
}

func BenchmarkCompile(b *testing.B) {
	b.Run("repetition", func(b *testing.B) {
		for b.Loop() {
			regexp.MustCompile(`^[A-Za-z0-9._~-]{1,253}$`)
		}
	})
	b.Run("bounded", func(b *testing.B) {
		for b.Loop() {
			MustCompile(`^[A-Za-z0-9._~-]+$`, 1, 253)
		}
	})
}
