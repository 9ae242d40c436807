package fingerprint_test

import (
	"encoding/hex"
	"testing"

	"github.com/mcpbus/mcpbus/libs/secretscan/fingerprint"
)

// The fingerprint of a value is fixed by Alg: a change of how sums are made
// must come with a new Alg (runners refuse a feed of another one), so this
// pins the sums of this one. Keys and values each change the sum.
func TestSumsOfAlg(t *testing.T) {
	if fingerprint.Alg != "siphash-2-4-128" {
		t.Fatalf("Alg %q: pin its sums below", fingerprint.Alg)
	}
	m := fingerprint.New([]byte("feed key"))
	for value, want := range map[string]string{
		"feed-only-value-77":  "077e542d852b34988af2a2014b599582",
		"sk-0123456789abcdef": "f3e5011ccce1dec3b12fced3deb11cb2",
	} {
		s := m.Of([]byte(value))
		if got := hex.EncodeToString(s[:]); got != want {
			t.Errorf("%s: %s, want %s", value, got, want)
		}
	}
	a, b := m.Of([]byte("feed-only-value-77")), fingerprint.New([]byte("feed key2")).Of([]byte("feed-only-value-77"))
	if a == b {
		t.Error("two keys made the same sum")
	}
	if m.Of([]byte("feed-only-value-78")) == a {
		t.Error("two values made the same sum")
	}
}
