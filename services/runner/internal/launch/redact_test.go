package launch

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mcpbus/mcpbus/libs/model"
)

func TestRedact(t *testing.T) {
	secrets := []string{"ghp_secret123", "abc", "", "hunter2", "secret", "line-one-of-key\nline-two-of-key\r\n", "ghp_secret123"}
	r := newRedactor(secrets)
	cases := []struct{ in, want string }{
		{"nothing to hide here", "nothing to hide here"},
		{"ghp_secret123", "[REDACTED]"},
		{"token=ghp_secret123; done", "token=[REDACTED]; done"},
		{"a ghp_secret123 b ghp_secret123 c", "a [REDACTED] b [REDACTED] c"},
		// The longer secret wins over the shorter one inside it, and
		// adjacent or overlapping occurrences become one marker.
		{"x ghp_secret1234", "x [REDACTED]4"},
		{"hunter2hunter2", "[REDACTED]"},
		{"secrethunter2!", "[REDACTED]!"},
		{"a secret!", "a [REDACTED]!"},
		// Values shorter than 4 bytes stay: they would blank out ordinary output.
		{"abc abc", "abc abc"},
		// Each line of a multi-line secret (a PEM keyfile) is a secret too.
		{"key: line-two-of-key", "key: [REDACTED]"},
		// A value split by the line boundary is out of scope: lines come one by one.
		{"ghp_secr", "ghp_secr"},
		{"", ""},
	}
	for _, c := range cases {
		if got := r.redact(c.in); got != c.want {
			t.Errorf("redact(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	if newRedactor(nil) != nil || newRedactor([]string{"", "abc"}) != nil {
		t.Fatal("a redactor with nothing to redact")
	}
	var none *redactor
	if none.redact("ghp_secret123") != "ghp_secret123" {
		t.Fatal("nil redactor changed the line")
	}
}

func FuzzRedact(f *testing.F) {
	f.Add("ghp_secret123", "prefix ghp_secret123 suffix")
	f.Add("aaaa", "aaaaaaaaa")
	f.Add("abab", "abababab")
	f.Fuzz(func(t *testing.T, secret, line string) {
		got := newRedactor([]string{secret}).redact(line)
		if len(secret) >= minSecretLen && strings.Contains(got, secret) && !strings.Contains(Redacted, secret) {
			t.Fatalf("redact(%q) with secret %q = %q", line, secret, got)
		}
		// (A multi-line secret also redacts its lines on their own.)
		if !strings.Contains(line, secret) && !strings.ContainsAny(secret, "\r\n") && got != line {
			t.Fatalf("redact(%q) changed a line without the secret %q: %q", line, secret, got)
		}
	})
}

// The lines a launched child writes to stderr reach OnStderr with the
// launch's secrets redacted; the child still gets the real values.
func TestPrepareRedactsStderr(t *testing.T) {
	bin := script(t, t.TempDir(), "srv", `echo "starting with token $API_TOKEN and password=$DB_PASS, plain $PLAIN" >&2
echo "$API_TOKEN" >&2`)
	var mu sync.Mutex
	var lines []string
	env := map[string]string{"API_TOKEN": "tok-7f3a9c", "DB_PASS": "pw-2b8d", "PLAIN": "plain-value"}
	l, err := Prepare(context.Background(), stdio(model.PackageBinary, bin), env, Options{
		OnStderr: func(line string) { mu.Lock(); lines = append(lines, line); mu.Unlock() },
		Secrets:  []string{"tok-7f3a9c", "pw-2b8d"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Process.cmd.Run(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"starting with token [REDACTED] and password=[REDACTED], plain plain-value", "[REDACTED]"}
	if !slices.Equal(lines, want) {
		t.Fatalf("stderr lines %q, want %q", lines, want)
	}
	if !slices.Contains(l.Process.cmd.Env, "API_TOKEN=tok-7f3a9c") {
		t.Fatalf("child env %q lacks the real value", l.Process.cmd.Env)
	}
}
