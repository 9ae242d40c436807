package guard_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mcpbus/mcpbus/services/chat/guard"
)

func TestRepeatsTripOnTheSameCallOnly(t *testing.T) {
	r := guard.NewRepeats(3)
	calls := []struct {
		tool, args string
		n          int
		tripped    bool
	}{
		{"fs__read", `{"path":"/a","n":1}`, 1, false},
		{"fs__read", `{ "n":1, "path":"/a" }`, 2, false}, // same value, other order and spacing
		{"fs__read", `{"path":"/b"}`, 1, false},
		{"fs__list", `{"path":"/a","n":1}`, 1, false},
		{"fs__read", `{"n":1,"path":"/a"}`, 3, true},
	}
	for i, c := range calls {
		n, tripped := r.Call(c.tool, json.RawMessage(c.args))
		if n != c.n || tripped != c.tripped {
			t.Errorf("call %d (%s %s): n=%d tripped=%v, want %d %v", i, c.tool, c.args, n, tripped, c.n, c.tripped)
		}
	}
	if string(guard.Canonical(nil)) != "{}" || string(guard.Canonical(json.RawMessage("null"))) != "{}" {
		t.Error("absent arguments are not {}")
	}
	if string(guard.Canonical(json.RawMessage(" not json "))) != "not json" {
		t.Error("invalid JSON is not kept as it is")
	}
}

func TestBreakerOpensAfterConsecutiveFailures(t *testing.T) {
	b := guard.NewBreaker(3)
	b.Record("gh", false)
	b.Record("gh", false)
	b.Record("fs", false)
	if b.Open("gh") {
		t.Fatal("open after 2 failures")
	}
	b.Record("gh", true) // a success resets the series
	for range 3 {
		b.Record("gh", false)
	}
	if !b.Open("gh") || b.Open("fs") {
		t.Fatalf("gh open %v (want true), fs open %v (want false)", b.Open("gh"), b.Open("fs"))
	}
	b.Record("gh", true)
	if b.Open("gh") {
		t.Fatal("still open after a success")
	}
}

func TestCutKeepsHeadAndTailWithinBudget(t *testing.T) {
	text := strings.Repeat("é", 5000) + "END" // 2-byte runes: a naive cut splits one
	out, cut := guard.Cut(text, 1000, `in result r1 (read it with read_result)`)
	if !cut || len(out) > 1000+2 || !strings.HasSuffix(out, "END") || !strings.HasPrefix(out, "é") {
		t.Fatalf("cut=%v len=%d head=%q tail=%q", cut, len(out), out[:10], out[len(out)-10:])
	}
	if !utf8.ValidString(out) || !strings.Contains(out, "[… 9003 of 10003 bytes cut here; the whole result is in result r1") {
		t.Fatalf("note or encoding wrong: %q", out)
	}
	if same, cut := guard.Cut("short", 1000, "x"); cut || same != "short" {
		t.Fatal("a short text was cut")
	}
}
