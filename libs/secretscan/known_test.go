package secretscan_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/mcpbus/mcpbus/libs/secretscan"
)

// A known value is found at each of its places among many repeated and
// distinct candidates of its length (the scan remembers the candidates it
// found unknown, not the known ones), and a candidate remembered as
// unknown is not taken for the known value that shares its slot.
func TestKnownAmongRepeatedCandidates(t *testing.T) {
	const value = "kv-0123456789-secret" // 20 bytes
	known := secretscan.NewKnown([]byte("k"), []string{value})
	var words []string
	for i := range 600 {
		words = append(words, fmt.Sprintf("word-%010d-abcd", i%300)) // 20 bytes, each twice
		if i%97 == 0 {
			words = append(words, value)
		}
	}
	payload := []byte(`{"text":"` + strings.Join(words, " ") + `"}`)
	found := scanner(t).Scan(payload, known)
	want := strings.Count(string(payload), value)
	if len(found) != want {
		t.Fatalf("found %d, want %d", len(found), want)
	}
	for _, f := range found {
		if string(payload[f.Start:f.End]) != value || f.Rule != secretscan.RuleKnown {
			t.Fatalf("finding %+v is %q", f, payload[f.Start:f.End])
		}
	}
}

// JSON strings are told apart by their unescaped quotes: a string ending in
// an escaped backslash closes at its quote, an escaped quote does not close
// one, and an unterminated last string is still read.
func TestKnownStringBounds(t *testing.T) {
	const value = "kv-0123456789-secret"
	known := secretscan.NewKnown([]byte("k"), []string{value})
	for _, p := range []string{
		`{"a":"p\\","b":"` + value + `"}`,
		`{"a":"say \"hi\" then","b":"` + value + `"}`,
		`{"a":"x\\\"y","b":"` + value + `"}`,
		`{"a":"x","b":"` + value,
	} {
		if found := scanner(t).Scan([]byte(p), known); len(found) != 1 || p[found[0].Start:found[0].End] != value {
			t.Errorf("%s: found %v", p, found)
		}
	}
}

// A known value quoted inside a JSON string (a tool's text quoting a
// command, `run \"VALUE\"`) is found: the escaped quotes around it are
// delimiters like the backslashes.
func TestKnownInsideEscapedQuotes(t *testing.T) {
	const value = "kv-0123456789-secret"
	known := secretscan.NewKnown([]byte("k"), []string{value})
	for _, p := range []string{
		`{"text":"run \"` + value + `\" now"}`,
		`{"text":"token=\"` + value + `\""}`,
		`{"text":"\"` + value + `\""}`,
		`{"cmd":"export T=\"` + value + `\";echo"}`,
	} {
		found := scanner(t).Scan([]byte(p), known)
		if len(found) != 1 || p[found[0].Start:found[0].End] != value || found[0].Rule != secretscan.RuleKnown {
			t.Errorf("%s: found %v", p, found)
		}
	}
}

// A known value on a line of its own in a JSON string, or after a tab, is
// found: the escape's letter (\n, \t) ends the word before the value as the
// character it stands for does. The backslash alone was a delimiter, so the
// value's token was "nVALUE" and a secret pasted between lines of text went
// through unseen. After an escaped backslash (\\n…: a backslash, then n…)
// both readings are tried, so a value that starts with that letter is
// found whole.
func TestKnownAfterAnEscapedNewline(t *testing.T) {
	const value = "kv-0123456789-secret"
	known := secretscan.NewKnown([]byte("k"), []string{value})
	long := strings.Repeat("prose ", 20)
	for _, p := range []string{
		`{"text":"line one\n` + value + `\nline three"}`,
		`{"text":"\n` + value + `"}`,
		`{"text":"a\t` + value + `"}`,
		`{"text":"a\r\n` + value + `\r\n"}`,
		`{"text":"` + long + `x\n` + value + `\n` + long + `"}`, // past the vector sieve's 64 bytes
		`{"text":"C:\\n` + value + `"}`,
	} {
		found := scanner(t).Scan([]byte(p), known)
		if len(found) != 1 || p[found[0].Start:found[0].End] != value || found[0].Rule != secretscan.RuleKnown {
			t.Errorf("%s: found %v", p, found)
		}
	}
	// A backslash, then a value starting with n: found whole.
	p := `{"text":"a \\nkv-0123456789-secret b"}`
	if found := scanner(t).Scan([]byte(p), secretscan.NewKnown([]byte("k"), []string{"n" + value})); len(found) != 1 || p[found[0].Start:found[0].End] != "n"+value {
		t.Errorf("%s: found %v", p, found)
	}
}

// A known value after candidates remembered as unknown that share its
// length and its first and last eight bytes (what the scan looks a
// candidate up by: the whole of one of 16 bytes or fewer, a longer one's
// middle compared) is found each time.
func TestKnownAmongLookalikes(t *testing.T) {
	values := []string{"abcdefgh-XY-ijklmnop", "password1234", "k3y-of-9b", "0123456789abcdef", "0123456789abcdefg"}
	lookalikes := []string{"abcdefgh-ZZ-ijklmnop", "abcdefgh-XYZijklmnop", "password5678", "passwordX234", "k3y-of-9c", "j3y-of-9b", "0123456789abcdeF", "0123456789Abcdef", "01234567X9abcdefg"}
	known := secretscan.NewKnown([]byte("k"), values)
	var words []string
	for range 4 {
		words = append(words, lookalikes...)
		words = append(words, lookalikes...)
		words = append(words, values...)
	}
	payload := []byte(`{"text":"` + strings.Join(words, " ") + `"}`)
	found := scanner(t).Scan(payload, known)
	if want := 4 * len(values); len(found) != want {
		t.Errorf("found %d, want %d", len(found), want)
	}
	for _, f := range found {
		if v := string(payload[f.Start:f.End]); !slices.Contains(values, v) {
			t.Errorf("finding %+v is %q", f, v)
		}
	}
}
