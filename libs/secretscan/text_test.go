package secretscan_test

import (
	"testing"

	"github.com/mcpbus/mcpbus/libs/secretscan"
)

// Scrub redacts JSON text as it is and other text as a JSON string, with
// the rules and the known values, and leaves text without secrets alone.
func TestScrub(t *testing.T) {
	known := secretscan.NewKnown([]byte("k"), []string{stored})
	withheld := func(rules string) string { return "withheld: " + rules }
	for _, c := range []struct{ in, want string }{
		{`{"message":"key ` + awsKey + `"}`, `{"message":"key [REDACTED:aws-access-token]"}`},
		{`say "hi" with ` + awsKey, `say "hi" with [REDACTED:aws-access-token]`},
		{"the password is " + stored + "\nbye", "the password is [REDACTED:mcpbus-known-secret]\nbye"},
		{`["` + stored + `"]`, `["[REDACTED:mcpbus-known-secret]"]`},
		{`nothing "secret" here`, `nothing "secret" here`},
	} {
		if got := secretscan.Scrub(c.in, known, withheld); got != c.want {
			t.Errorf("Scrub(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	if got := secretscan.Scrub("key "+awsKey, nil, withheld); got != "key [REDACTED:aws-access-token]" {
		t.Errorf("without known values: %q", got)
	}
}
