package secretscan_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mcpbus/mcpbus/libs/secretscan"
	"github.com/mcpbus/mcpbus/libs/secretscan/fingerprint"
)

// Test values: shaped like real credentials, valid nowhere.
const (
	awsKey      = "AKIAZ3MQXP7R2HKW5Y4N"
	githubToken = "ghp_R7dK2mQx9LpV4sTz8NwB3yHc6JfG1aEu5XoP"
	apiKey      = "mcpbus_0123456789abcdef_" + "Qm9vdHN0cmFwLXRlc3Qta2V5LW5vdC1hLXNlY3JldA1"
	seed        = "SUAGMJH5XLGZKQ7DRTNQ6RBN3J5PJ3E3C6EBLNKNZDIGRWKHSBTWHQPTZQ"
	stored      = "correct-horse-battery-staple-42"
)

func scanner(t testing.TB) *secretscan.Scanner {
	t.Helper()
	s, err := secretscan.Default()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestScanFindsEachKind(t *testing.T) {
	s := scanner(t)
	known := secretscan.NewKnown([]byte("fingerprint key"), []string{stored, "short"})
	for _, c := range []struct{ name, payload, rule string }{
		{"aws", `{"key":"` + awsKey + `"}`, "aws-access-token"},
		{"github", `{"text":"token ` + githubToken + ` here"}`, "github-pat"},
		{"api key", `{"h":"Authorization: Bearer ` + apiKey + `"}`, secretscan.RuleAPIKey},
		{"seed", `{"value":"` + seed + `"}`, secretscan.RuleSeed},
		{"known whole", `{"value":"` + stored + `"}`, secretscan.RuleKnown},
		{"known in a url", `{"url":"https://u:` + stored + `@db.example/x"}`, secretscan.RuleKnown},
		{"known in words", `{"q":"my pass is ` + stored + ` ok"}`, secretscan.RuleKnown},
	} {
		t.Run(c.name, func(t *testing.T) {
			found := s.Scan([]byte(c.payload), known)
			if rules := secretscan.Rules(found); len(rules) != 1 || rules[0] != c.rule {
				t.Fatalf("rules %v, want [%s]", rules, c.rule)
			}
			out, err := secretscan.Redact([]byte(c.payload), found)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(out), secretscan.Marker(c.rule)) {
				t.Fatalf("redacted %s has no marker", out)
			}
			for _, v := range []string{awsKey, githubToken, apiKey, seed, stored} {
				if strings.Contains(string(out), v) {
					t.Fatalf("redacted %s still holds a value", out)
				}
			}
		})
	}
}

func TestScanLeavesOrdinaryPayloads(t *testing.T) {
	s := scanner(t)
	known := secretscan.NewKnown([]byte("k"), []string{stored})
	for _, p := range []string{
		`{}`,
		`{"path":"/tmp/notes.txt","query":"select * from users where id = 42"}`,
		`{"content":[{"type":"text","text":"The weather in Paris is 18°C, light rain."}]}`,
		`{"note":"correct-horse-battery-staple-43"}`, // one character off a known value
		`{"key":"AKIAIOSFODNN7EXAMPLE"}`,             // AWS's documented example, allowed by gitleaks
	} {
		if found := s.Scan([]byte(p), known); len(found) != 0 {
			t.Errorf("%s: found %v", p, secretscan.Rules(found))
		}
	}
}

func TestKnownHoldsNoValue(t *testing.T) {
	known := secretscan.NewKnown([]byte("k"), []string{stored, "1234567"})
	if known.Len() != 1 {
		t.Fatalf("%d fingerprints, want 1 (a 7-character value is too short)", known.Len())
	}
	// The set is fingerprints: nothing of the value is in its printed form
	// (%#v prints the unexported fields too).
	if s := fmt.Sprintf("%#v", known); strings.Contains(s, stored) {
		t.Fatal("the set holds the value")
	}
	other := secretscan.NewKnown([]byte("another key"), []string{"zzzzzzzzzzzzz"})
	if found := scanner(t).Scan([]byte(`{"p":"`+stored+`"}`), other); len(found) != 0 {
		t.Fatalf("found %v with another set", found)
	}
}

func TestKnownValueWithEscapes(t *testing.T) {
	v := `pa"ss\word-123`
	known := secretscan.NewKnown([]byte("k"), []string{v})
	payload, _ := json.Marshal(map[string]string{"p": v})
	found := scanner(t).Scan(payload, known)
	if len(found) != 1 {
		t.Fatalf("found %v in %s", found, payload)
	}
	out, err := secretscan.Redact(payload, found)
	if err != nil || string(out) != `{"p":"[REDACTED:mcpbus-known-secret]"}` {
		t.Fatalf("redacted %s, %v", out, err)
	}
}

func TestRedactRefusesBrokenJSON(t *testing.T) {
	payload := []byte(`{"a":"x","b":"y"}`)
	if _, err := secretscan.Redact(payload, []secretscan.Finding{{Rule: "r", Start: 7, End: 12}}); err != secretscan.ErrUnredactable {
		t.Fatalf("err %v, want ErrUnredactable", err)
	}
}

// TestScanConcurrent shares one scanner between goroutines (run with -race).
func TestScanConcurrent(t *testing.T) {
	s := scanner(t)
	known := secretscan.NewKnown([]byte("k"), []string{stored})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := []byte(`{"i":` + string(rune('0'+i)) + `,"a":"` + awsKey + `","b":"` + stored + `"}`)
			for range 20 {
				if got := secretscan.Rules(s.Scan(p, known)); len(got) != 2 {
					t.Errorf("rules %v", got)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// A JWT is still found (its keyword narrowed to "eyJ"), and prose with
// rule keywords ("key", "token") is not a finding.
func TestScanJWTAndProse(t *testing.T) {
	s := scanner(t)
	jwt := "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
	if rules := secretscan.Rules(s.Scan([]byte(`{"auth":"Bearer `+jwt+`"}`), nil)); !slices.Contains(rules, "jwt") {
		t.Fatalf("rules %v, want jwt", rules)
	}
	prose := `{"message":"Rotate the API key and the access token; never share a password."}`
	if found := s.Scan([]byte(prose), nil); len(found) != 0 {
		t.Fatalf("prose: %v", secretscan.Rules(found))
	}
}

// A set made elsewhere (the credential service's feed: sums and lengths
// under its key) merged with a runner's own set under another key: each
// group's values are found, and malformed sums are refused.
func TestKnownFromSumsMerged(t *testing.T) {
	feedKey := []byte("feed key")
	m := fingerprint.New(feedKey)
	var sums []byte
	var lengths []int
	for _, v := range []string{"feed-only-value-77"} {
		s := m.Of([]byte(v))
		sums, lengths = append(sums, s[:]...), append(lengths, len(v))
	}
	feed, err := secretscan.KnownFromSums(fingerprint.Alg, feedKey, sums, lengths)
	if err != nil {
		t.Fatal(err)
	}
	own := secretscan.NewKnown([]byte("runner key"), []string{stored})
	both := secretscan.Merge(own, feed, nil)
	if both.Len() != 2 {
		t.Fatalf("%d fingerprints, want 2", both.Len())
	}
	s := scanner(t)
	for _, v := range []string{stored, "feed-only-value-77"} {
		if rules := secretscan.Rules(s.Scan([]byte(`{"m":"x `+v+` y"}`), both)); len(rules) != 1 || rules[0] != secretscan.RuleKnown {
			t.Errorf("%s: rules %v", v, rules)
		}
	}
	if found := s.Scan([]byte(`{"m":"feed-only-value-78"}`), both); len(found) != 0 {
		t.Errorf("a value of the same length not in the set: %v", found)
	}
	if _, err := secretscan.KnownFromSums(fingerprint.Alg, feedKey, sums[:15], lengths); err == nil {
		t.Error("15 bytes of sums were accepted")
	}
	if _, err := secretscan.KnownFromSums(fingerprint.Alg, feedKey, sums, []int{3}); err == nil {
		t.Error("a length under the minimum was accepted")
	}
	if _, err := secretscan.KnownFromSums("hmac-sha256-128", feedKey, sums, lengths); err == nil {
		t.Error("sums made with another algorithm were accepted")
	}
}

// ScanSkipping finds what Scan finds outside the skipped values, at their
// places in the whole payload, and nothing inside them.
func TestScanSkipping(t *testing.T) {
	const aws = "AKIAZ3MQXP7R2HKW5Y4N"
	known := secretscan.NewKnown([]byte("k"), []string{stored})
	skipped := `"` + aws + `"`
	p := `{"a":"key ` + aws + ` here","data":` + skipped + `,"b":"x ` + stored + ` y","c":` + skipped + `}`
	i := strings.Index(p, skipped)
	j := strings.LastIndex(p, skipped)
	skip := []secretscan.Span{{Start: i, End: i + len(skipped)}, {Start: j, End: j + len(skipped)}}
	s := scanner(t)
	got := s.ScanSkipping([]byte(p), known, skip)
	if len(got) != 2 {
		t.Fatalf("found %v, want the key in a and the stored value in b", got)
	}
	if p[got[0].Start:got[0].End] != aws || got[0].Start != strings.Index(p, aws) {
		t.Errorf("first finding %+v is %q", got[0], p[got[0].Start:got[0].End])
	}
	if p[got[1].Start:got[1].End] != stored || got[1].Rule != secretscan.RuleKnown {
		t.Errorf("second finding %+v is %q", got[1], p[got[1].Start:got[1].End])
	}
	spans := map[int]bool{}
	for _, f := range s.ScanSkipping([]byte(p), known, nil) {
		spans[f.Start] = true
	}
	if len(spans) != 4 {
		t.Errorf("nothing skipped: %d places found, want 4", len(spans))
	}
}

// A credential on a line of its own in a JSON string ("…\nAKIA…"), or
// after a tab, is found as one after a space is: the rules read the JSON
// text as sent, where the escape's letter was glued to the value and broke
// the word boundary the AWS rule (\bAKIA…) and the seed check need. The
// finding's offsets are the payload's, so redaction replaces the value.
func TestRulesAfterAnEscapedNewline(t *testing.T) {
	s := scanner(t)
	for _, c := range []struct{ value, rule string }{
		{awsKey, "aws-access-token"},
		{seed, secretscan.RuleSeed},
	} {
		for _, before := range []string{`key:\n`, `\n`, `key\t`, `a\r\n`, `x\f`} {
			p := `{"text":"` + before + c.value + `\nmore"}`
			found := s.Scan([]byte(p), nil)
			if len(found) != 1 || found[0].Rule != c.rule || p[found[0].Start:found[0].End] != c.value {
				t.Errorf("%s: found %v, want %s at the value", p, found, c.rule)
			}
		}
	}
	// An escaped backslash before a letter is a backslash and the letter:
	// the letter stays part of the word.
	p := `{"text":"C:\\nAKIAZ3MQXP7R2HKW5Y4N"}`
	if found := s.Scan([]byte(p), nil); len(found) != 0 {
		t.Errorf("%s: found %v, want none (the key is glued to an n)", p, found)
	}
}
