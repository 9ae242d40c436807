package mcpserver

import "testing"

func TestResourceURIsRoundTrip(t *testing.T) {
	for _, uri := range []string{
		"test://greeting", "file:///home/me/a b.txt", "https://x.example/p?q=1&r=%20#f",
		"mcpbus://other/nested", "weird/../path", "ünïcode:ressource",
	} {
		ns := resourceURI("srv-1", uri)
		s, orig, ok := parseURI(ns)
		if !ok || s != "srv-1" || orig != uri {
			t.Fatalf("%q → %q → (%q, %q, %v)", uri, ns, s, orig, ok)
		}
	}
	// A template keeps its expressions; expanding one gives a URI that parses
	// back to what the server's template would have produced.
	tmpl := templateURI("srv", "file:///logs/{name}.txt")
	if tmpl != "mcpbus://srv/file:%2F%2F%2Flogs%2F{name}.txt" {
		t.Fatalf("template %q", tmpl)
	}
	if s, orig, ok := parseURI(tmpl); !ok || s != "srv" || orig != "file:///logs/{name}.txt" {
		t.Fatalf("template parses to (%q, %q, %v)", s, orig, ok)
	}
	if s, orig, ok := parseURI("mcpbus://srv/file:%2F%2F%2Flogs%2Fapp.txt"); !ok || s != "srv" || orig != "file:///logs/app.txt" {
		t.Fatalf("expanded template parses to (%q, %q, %v)", s, orig, ok)
	}
	for _, bad := range []string{"test://greeting", "mcpbus://", "mcpbus://srv", "mcpbus://srv/", "mcpbus://Bad Server/x", "mcpbus://srv/%zz"} {
		if _, _, ok := parseURI(bad); ok {
			t.Fatalf("%q parsed", bad)
		}
	}
}

func TestClashNameStable(t *testing.T) {
	a, b := clashName("a__b__c", "a", "b__c"), clashName("a__b__c", "a__b", "c")
	if a == b || a != clashName("a__b__c", "a", "b__c") || !exposedName.MatchString(a) || !exposedName.MatchString(b) {
		t.Fatalf("clash names %q %q", a, b)
	}
	long := clashName("s__"+string(make([]byte, 100)), "s", "x")
	if len(long) != 64 || !exposedName.MatchString(long) {
		t.Fatalf("long clash name %q (%d)", long, len(long))
	}
}
