package secretscan

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// walkValues are known values shaped to meet the walk's edge cases: a
// plain token, tokens with delimiters inside (found as words), one a token
// of another (both found), one with whitespace (only a whole string), one
// with a quote (found JSON-escaped), one of the shortest length, one longer
// than the walk's mask of the last bytes (63).
var walkValues = []string{
	"kv-0123456789-secret", "tok:en=with/delims", "x=SECRET12value", "SECRET12value",
	"two words here ok", `ab"cdefgh12`, "Zq7Kp2Lm", "ſecret-ünicode-9",
	"https://user:0123456789abcdef0123456789abcdef@db.example.com/name?ssl=true",
}

// walkSets are sets of walkValues: all, those of 20 bytes or more, the one
// longer than 63 (the walk stops only at words as long as a set's shortest).
func walkSets() []*Known {
	return []*Known{NewKnown([]byte("k"), walkValues),
		NewKnown([]byte("k"), []string{walkValues[0], walkValues[8]}), NewKnown([]byte("k"), walkValues[8:])}
}

// walkPieces are the texts random payloads are made of: JSON structure,
// escapes, whitespace, multi-byte runes (the fold runes among them), and
// delimiters.
var walkPieces = []string{
	`"`, `\"`, `\\`, `\`, `\\\"`, `":"`, `","`, `{"k":"`, `"}`, `[`, `]`, `:`, `,`, `=`, `&`, `?`, `/`, `@`,
	" ", "  ", "\t", "\n", `\n`, `\t`, `\u0041`, "é", "’", "\u0130", "\u017f", "\u212a", "日本", "🔑",
	"lorem", "ipsum", "12345678", "abcdefgh", "ABCDEFGHIJ",
}

// walkPayload is a random payload of pieces, keywords (any case, whole or
// cut) and known values (whole, cut, next to delimiters), sometimes cut
// anywhere (a string or an escape left open at the end).
func walkPayload(rnd *rand.Rand, keywords []string) string {
	var b strings.Builder
	if rnd.IntN(2) == 0 {
		b.WriteString(`{"text":"`)
	}
	for range rnd.IntN(40) {
		switch r := rnd.IntN(10); {
		case r < 3:
			k := []byte(keywords[rnd.IntN(len(keywords))])
			for i := range k {
				if rnd.IntN(2) == 0 && k[i] >= 'a' && k[i] <= 'z' {
					k[i] -= 'a' - 'A'
				}
			}
			if rnd.IntN(5) == 0 {
				k = k[:rnd.IntN(len(k)+1)]
			}
			b.Write(k)
		case r < 5:
			v := walkValues[rnd.IntN(len(walkValues))]
			if rnd.IntN(2) == 0 {
				v = strings.ReplaceAll(v, `"`, `\"`)
			}
			if rnd.IntN(6) == 0 {
				v = v[:rnd.IntN(len(v)+1)]
			}
			if rnd.IntN(2) == 0 { // a word of its own
				v = " " + v + " "
			}
			b.WriteString(v)
		case r < 6:
			b.WriteByte(byte(rnd.IntN(256)))
		default:
			b.WriteString(walkPieces[rnd.IntN(len(walkPieces))])
		}
	}
	p := b.String()
	if rnd.IntN(4) == 0 && len(p) > 0 {
		p = p[:rnd.IntN(len(p))]
	}
	return p
}

// walkCases are crafted payloads: keywords at the payload's end (two-byte
// ones included) and across a string's quotes, known values at every kind
// of token edge, escaped quotes and backslashes before a string's end.
var walkCases = []string{
	"", `"`, `""`, `\"`, "sk", "s.", "xsk", `"sk`, "ask", "AKIA", `{"a":"akia"}`, `{"k":"x"}key`, `"passw"ord"`,
	`{"a":"kv-0123456789-secret"}`, `{"a":"kv-0123456789-secret`, `kv-0123456789-secret`,
	`{"a":"run \"kv-0123456789-secret\" now"}`, `{"a":"u:kv-0123456789-secret@h"}`,
	`{"a":"say x=SECRET12value ok"}`, `{"a":"x=SECRET12value"}`, `{"a":"two words here ok"}`,
	`{"a":"two words here ok "}`, `{"a":"p\\","b":"Zq7Kp2Lm"}`, `{"a":"p\\\"Zq7Kp2Lm\\"}`,
	`{"a":"ab\"cdefgh12"}`, `{"a":"ab\"cdefgh12 ab\"cdefgh12"}`, "{\"a\":\"\u017fecret-\u00fcnicode-9\"}",
	`{"a":"Zq7Kp2Lm\nZq7Kp2Lm\tZq7Kp2Lm"}`, `Zq7Kp2Lm "Zq7Kp2Lm" Zq7Kp2Lm`, "{\"a\":\"x \u212a\"}",
	// Words longer than the walk's whitespace mask (63 bytes), whose start
	// is looked for further back: after a space, a tab, the string's quote,
	// with a control byte (under 0x21, not whitespace) on the way.
	`{"a":"pre Zq7Kp2Lm/` + strings.Repeat("y", 150) + `"}`, "{\"a\":\"pre\tZq7Kp2Lm/" + strings.Repeat("y", 150) + `"}`,
	`{"a":"Zq7Kp2Lm/` + strings.Repeat("y", 150) + `"}`, `{"a":"pre Zq7Kp2Lm/` + strings.Repeat("y", 70) + "\x01" + strings.Repeat("y", 70) + `"}`,
	`{"a":"pre ` + strings.Repeat("y", 150) + `/Zq7Kp2Lm"}`, `{"a":"p ` + strings.Repeat("y", 7) + `/Zq7Kp2Lm` + strings.Repeat("z", 61) + `"}`,
}

// The walk finds what the two passes it replaced found: the same rules,
// the same keyword occurrences in the same order, the same known values.
func TestWalkMatchesSeparatePasses(t *testing.T) {
	s := testScanner(t)
	old := newPairPrefilter(s.keywords)
	sets := walkSets()
	keywords := s.keywords.keywordList()
	rnd := rand.New(rand.NewPCG(3, 4))
	payloads := slices.Clone(walkCases)
	for range 20000 {
		payloads = append(payloads, walkPayload(rnd, keywords))
	}
	hits, found := 0, make([]int, len(sets))
	for i, p := range payloads {
		h, f := compareWalk(t, s, old, sets[i%len(sets)], []byte(p))
		hits, found[i%len(sets)] = hits+h, found[i%len(sets)]+f
	}
	// The payloads must have exercised both halves, each set of values.
	t.Logf("%d payloads: %d keyword occurrences, known values by set %v", len(payloads), hits, found)
	if hits < len(payloads) || slices.Min(found) < 50 {
		t.Fatalf("%d payloads held only %d keyword occurrences and known values by set %v", len(payloads), hits, found)
	}
}

// compareWalk fails t if the walk and the separate passes disagree on b,
// and returns the keyword occurrences and known values found.
func compareWalk(t testing.TB, s *Scanner, old *pairPrefilter, known *Known, b []byte) (int, int) {
	t.Helper()
	var wantHits, gotHits []hit
	wantSet := old.rules(b, &wantHits)
	wantFound := separateKnown(known, b)
	gotSet, gotFound := s.keywords.walk(b, &gotHits, known)
	if gotSet != wantSet || !slices.Equal(gotHits, wantHits) {
		t.Fatalf("%q: keywords %s, want %s", b, hitWords(gotHits), hitWords(wantHits))
	}
	if !slices.Equal(gotFound, wantFound) {
		t.Fatalf("%q: known values at %v, want %v", b, gotFound, wantFound)
	}
	// Without known values the walk finds the same keywords.
	var bare []hit
	if set, found := s.keywords.walk(b, &bare, nil); set != wantSet || !slices.Equal(bare, wantHits) || found != nil {
		t.Fatalf("%q without known values: keywords %s, found %v", b, hitWords(bare), found)
	}
	return len(gotHits), len(gotFound)
}

func hitWords(hs []hit) string {
	var out []string
	for _, h := range hs {
		out = append(out, fmt.Sprintf("%s@%d", h.k.word, h.pos))
	}
	return fmt.Sprint(out)
}

// Scan finds what it found when its passes were separate, gitleaks' rules
// and the nkey seeds included, in the same order.
func TestScanMatchesSeparatePasses(t *testing.T) {
	s := testScanner(t)
	old := newPairPrefilter(s.keywords)
	known := NewKnown([]byte("k"), walkValues)
	rnd := rand.New(rand.NewPCG(7, 8))
	secrets := []string{"AKIAZ3MQXP7R2HKW5Y4N", "ghp_R7dK2mQx9LpV4sTz8NwB3yHc6JfG1aEu5XoP",
		"SUAGMJH5XLGZKQ7DRTNQ6RBN3J5PJ3E3C6EBLNKNZDIGRWKHSBTWHQPTZQ", "mcpbus_0123456789abcdef_Qm9vdHN0cmFwLXRlc3Qta2V5LW5vdC1hLXNlY3JldA1"}
	found := 0
	for i := range 400 {
		p := walkPayload(rnd, secrets) + prose(rnd, rnd.IntN(200))
		if i%3 == 0 {
			p = `{"text":"` + secrets[i%len(secrets)] + " " + walkValues[i%len(walkValues)] + `"} ` + p
		}
		want := separateScan(s, old, []byte(p), known)
		got := s.Scan([]byte(p), known)
		if !slices.Equal(got, want) {
			t.Fatalf("%q: found %v, want %v", p, got, want)
		}
		found += len(got)
	}
	if found < 400 {
		t.Fatalf("only %d findings in 400 payloads", found)
	}
}

// separateScan is Scan as it was, its passes separate.
func separateScan(s *Scanner, old *pairPrefilter, payload []byte, known *Known) []Finding {
	var hits []hit
	set := old.rules(payload, &hits)
	text := blankEscapes(payload, nil)
	out := s.ruleFindings(text, set, hits, nil)
	out = append(out, seeds(text)...)
	out = append(out, separateKnown(known, payload)...)
	slices.SortFunc(out, func(a, b Finding) int { return a.Start - b.Start })
	return out
}

// FuzzWalk: on any bytes, the walk agrees with the separate passes.
func FuzzWalk(f *testing.F) {
	for _, c := range walkCases {
		f.Add([]byte(c))
	}
	s, err := Default()
	if err != nil {
		f.Fatal(err)
	}
	old := newPairPrefilter(s.keywords)
	sets := walkSets()
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, known := range sets {
			compareWalk(t, s, old, known, b)
		}
	})
}
