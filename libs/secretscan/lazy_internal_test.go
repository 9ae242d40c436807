package secretscan

import "testing"

// compiled counts the rules whose regexp has been compiled.
func compiled(s *Scanner) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.rules {
		if r.Regex != nil {
			n++
		}
	}
	return n
}

// A new scanner holds no compiled rule; a payload without keywords compiles
// none, one with an AWS key those its keywords name, and they find it.
func TestRegexpsCompiledOnUse(t *testing.T) {
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	if n := compiled(s); n != 0 || len(s.rules) < 100 {
		t.Fatalf("new scanner: %d of %d rules compiled, want 0 of 100 or more", n, len(s.rules))
	}
	if found := s.Scan([]byte(`{"message":"nothing to see"}`), nil); len(found) != 0 || compiled(s) != 0 {
		t.Fatalf("plain payload: %v found, %d rules compiled", found, compiled(s))
	}
	found := s.Scan([]byte(`{"key":"AKIAZ3MQXP7R2HKW5Y4N"}`), nil)
	if rules := Rules(found); len(rules) != 1 || rules[0] != "aws-access-token" {
		t.Fatalf("aws key: rules %v", rules)
	}
	if n := compiled(s); n == 0 || n > len(s.rules)/4 {
		t.Fatalf("after an aws key: %d of %d rules compiled, want a few", n, len(s.rules))
	}
}

// Every rule compiles when a payload names it (New compiled each once to
// check it, then dropped it): a detector of all rules builds.
func TestEveryRuleCompiles(t *testing.T) {
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	var all ruleSet
	for i := range s.rules {
		all.add(i)
	}
	if s.detector(all) == nil {
		t.Fatal("no detector")
	}
	if n := compiled(s); n != len(s.rules) {
		t.Fatalf("%d of %d rules compiled", n, len(s.rules))
	}
	for i, r := range s.rules {
		if r.Regex.String() != s.sources[i] {
			t.Fatalf("rule %s: regexp %q, source %q", r.RuleID, r.Regex, s.sources[i])
		}
	}
}
