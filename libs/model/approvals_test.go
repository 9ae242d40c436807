package model

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestGlob(t *testing.T) {
	for _, c := range []struct {
		pattern, s string
		want       bool
	}{
		{"fs__*", "fs__write", true},
		{"fs__*", "git__log", false},
		{"oauth:https://idp.example/*#alice", "oauth:https://idp.example/realms/x#alice", true},
		{"*__delete_*", "gh__delete_repo", true},
		{"a*b*c", "acb", false},
		{"exact", "exact", true},
		{"exact", "exactly", false},
		// '?' and '[' make it a path.Match pattern (the chat profiles' globs).
		{"fs__rea?", "fs__read", true},
		{"fs__[rw]*", "fs__write", true},
		{"fs__[rw]*", "fs__delete", false},
	} {
		if got := Glob(c.pattern, c.s); got != c.want {
			t.Errorf("Glob(%q, %q) = %v", c.pattern, c.s, got)
		}
	}
}

func TestApprovalRulesDecideAndValidate(t *testing.T) {
	r := ApprovalRules{Default: ApprovalAsk, Rules: []GatewayApprovalRule{
		{Tool: "fs__read", Decision: ApprovalAllow},
		{Tool: "*", Principal: "key:ci", Decision: ApprovalDeny},
	}}
	if d, _ := r.Decide("fs__read", "key:ci"); d != ApprovalAllow {
		t.Errorf("first rule: %s", d)
	}
	if d, rule := r.Decide("fs__write", "key:ci"); d != ApprovalDeny || rule == nil {
		t.Errorf("principal rule: %s", d)
	}
	if d, rule := r.Decide("fs__write", "key:ops"); d != ApprovalAsk || rule != nil {
		t.Errorf("default: %s", d)
	}
	if e := r.Validate(); e != nil {
		t.Fatal(e)
	}
	for field, bad := range map[string]ApprovalRules{
		"default":             {Default: "maybe"},
		"rules.0.decision":    {Rules: []GatewayApprovalRule{{Tool: "x", Decision: "yes"}}},
		"rules.0.tool":        {Rules: []GatewayApprovalRule{{Decision: ApprovalAsk}}},
		"timeout_seconds":     {TimeoutSeconds: 99999},
		"rules.0.approvers.0": {Rules: []GatewayApprovalRule{{Tool: "x", Decision: ApprovalAsk, Approvers: []string{""}}}},
	} {
		if e := bad.Validate(); e == nil || e.Field != field {
			t.Errorf("%+v: %v, want field %s", bad, e, field)
		}
	}
}

// A chat profile's policy is a rule set of the engine: first match, then
// the default, for any principal; a bad pattern is refused in engine rules.
func TestProfilePolicyIsEngineRules(t *testing.T) {
	p := ApprovalPolicy{Default: ApprovalAsk, Rules: []ApprovalRule{{Tool: "files__read_*", Decision: ApprovalAllow}, {Tool: "*__delete_?", Decision: ApprovalDeny}}}
	r := p.EngineRules()
	for tool, want := range map[string]string{"files__read_file": ApprovalAllow, "x__delete_a": ApprovalDeny, "x__delete_ab": ApprovalAsk, "files__write": ApprovalAsk} {
		if d, _ := r.Decide(tool, "key:anyone"); d != want || p.Decide(tool) != want {
			t.Errorf("%s: engine %s, profile %s, want %s", tool, d, p.Decide(tool), want)
		}
	}
	bad := ApprovalRules{Rules: []GatewayApprovalRule{{Tool: "fs__[", Decision: ApprovalAsk}}}
	if e := bad.Validate(); e == nil || e.Field != "rules.0.tool" {
		t.Errorf("a bad pattern: %v", e)
	}
}

func TestCanonicalArgs(t *testing.T) {
	_, a, _ := CanonicalArgs(json.RawMessage(`{"b": [1, {"y":2,"x":1}], "a": 1.50}`))
	_, b, _ := CanonicalArgs(json.RawMessage(`{"a":1.50,"b":[1,{"x":1,"y":2}]}`))
	_, c, _ := CanonicalArgs(json.RawMessage(`{"a":1.5,"b":[1,{"x":1,"y":2}]}`))
	if a != b {
		t.Error("key order changed the hash")
	}
	if a == c {
		t.Error("1.50 and 1.5 hash the same: the hash must bind the arguments as sent")
	}
	if _, _, err := CanonicalArgs(json.RawMessage(`{`)); err == nil {
		t.Error("bad JSON accepted")
	}
}

// A tool whose namespaced name differs from <server>__<tool> (a dot
// sanitised, a long name shortened) is matched by rules naming either.
func TestDecideNamesMatchesTheServersName(t *testing.T) {
	dotted := NamespacedName("fs", "files.remove")
	if dotted == "fs__files.remove" {
		t.Fatalf("NamespacedName kept the dot: %s", dotted)
	}
	names := ToolNames(dotted, "fs", "files.remove")
	if len(names) != 2 || names[0] != dotted || names[1] != "fs__files.remove" {
		t.Fatalf("ToolNames: %q", names)
	}
	if got := ToolNames("fs__read", "fs", "read"); len(got) != 1 {
		t.Fatalf("a name that is <server>__<tool> is one name: %q", got)
	}
	if got := ToolNames("fs__read", "fs", ""); len(got) != 1 {
		t.Fatalf("no server tool name, one name: %q", got)
	}
	r := ApprovalRules{Rules: []GatewayApprovalRule{
		{Tool: "fs__files.*", Decision: ApprovalDeny},
		{Tool: dotted, Decision: ApprovalAsk},
	}}
	if d, rule := r.DecideNames(names, "key:x"); d != ApprovalDeny || rule != &r.Rules[0] {
		t.Errorf("the server's name: %s, want the first rule's deny", d)
	}
	if d, _ := r.Decide(dotted, "key:x"); d != ApprovalAsk {
		t.Errorf("the listed name alone: %s, want ask", d)
	}
	long := strings.Repeat("x", 80)
	short := NamespacedName("fs", long)
	if d, _ := r.DecideNames(ToolNames(short, "fs", long), "key:x"); d != ApprovalAllow {
		t.Errorf("no rule names it: %s", d)
	}
	r.Rules = append(r.Rules, GatewayApprovalRule{Tool: "fs__" + long, Decision: ApprovalDeny})
	if d, _ := r.DecideNames(ToolNames(short, "fs", long), "key:x"); d != ApprovalDeny {
		t.Errorf("a rule naming the long name whole: %s, want deny", d)
	}
	if (HeldCall{Tool: dotted, Server: "fs", ServerTool: "files.remove"}).ToolNames()[1] != "fs__files.remove" {
		t.Error("a held call's names lack the server's")
	}
}

// Filters on namespaced names (a key's, a chat profile's) take a tool by any
// of its names: one allowed is enough, one denied is too many.
func TestFiltersMatchTheServersName(t *testing.T) {
	dotted := NamespacedName("fs", "files.remove")
	names := ToolNames(dotted, "fs", "files.remove")
	for _, c := range []struct {
		f    ToolFilter
		want bool
	}{
		{ToolFilter{}, true},
		{ToolFilter{Deny: []string{"fs__files.*"}}, false},
		{ToolFilter{Deny: []string{dotted}}, false},
		{ToolFilter{Allow: []string{"fs__files.*"}}, true},
		{ToolFilter{Allow: []string{"fs__files_*"}}, true},
		{ToolFilter{Allow: []string{"git__*"}}, false},
		{ToolFilter{Allow: []string{"fs__*"}, Deny: []string{"fs__files.remove"}}, false},
	} {
		if got := c.f.AllowsNames(names...); got != c.want {
			t.Errorf("%+v: %v, want %v", c.f, got, c.want)
		}
		chat := ChatToolFilter{Include: c.f.Allow, Exclude: c.f.Deny}
		if got := chat.Allows(names...); got != c.want {
			t.Errorf("chat %+v: %v, want %v", chat, got, c.want)
		}
	}
	if (ToolFilter{Deny: []string{"fs__files.*"}}).AllowsNames(dotted) != true {
		t.Error("by the listed name alone the deny does not apply")
	}
}
