package model_test

import (
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/mcpbus/mcpbus/libs/model"
)

var (
	namespacedRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
	tokenRE      = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)
	hashSuffixRE = regexp.MustCompile(`_[0-9a-f]{8}$`)
)

func TestSlugify(t *testing.T) {
	cases := map[string]string{
		"GitHub":                        "github",
		"GitHub MCP Server":             "github-mcp-server",
		"  Brave Search!  ":             "brave-search",
		"my_server 2":                   "my_server-2",
		"@modelcontextprotocol/server":  "modelcontextprotocol-server",
		"a - b -- c":                    "a-b-c",
		"a-b":                           "a-b",
		"--lead and trail--":            "lead-and-trail",
		"Ünïcödé Name":                  "n-c-d-name",
		"Café Crème":                    "caf-cr-me",
		"日本語":                           "",
		"日本語 server":                    "server",
		"\u212a":                        "k", // KELVIN SIGN lower-cases to ASCII k
		"":                              "",
		"   ":                           "",
		"---":                           "",
		"!!!":                           "",
		"_":                             "",
		"a__b":                          "a_b",
		"a___b_":                        "a_b",
		"a _ _b":                        "a-_-_b",
		"_lead":                         "_lead",
		"x" + strings.Repeat("_", 60):   "x",
		"x\x00y\tz\n":                   "x-y-z",
		"Filesystem (read-only) v2.1.0": "filesystem-read-only-v2-1-0",
	}
	for in, want := range cases {
		got := model.Slugify(in)
		if got != want {
			t.Errorf("Slugify(%q) = %q, want %q", in, got, want)
		}
		if got != "" && !model.ValidSlug(got) {
			t.Errorf("Slugify(%q) = %q is not a valid slug", in, got)
		}
		if got != "" && !model.SeparableSlug(got) {
			t.Errorf("Slugify(%q) = %q is not separable", in, got)
		}
	}
	long := strings.Repeat("abcdefghij ", 20)
	if got := model.Slugify(long); len(got) > 48 || !model.ValidSlug(got) || strings.HasSuffix(got, "-") {
		t.Errorf("Slugify(long) = %q (%d)", got, len(got))
	}
	// A cut that lands on a dash drops it.
	name := strings.Repeat("a", 47) + " b"
	if got := model.Slugify(name); got != strings.Repeat("a", 47) {
		t.Errorf("Slugify(cut at dash) = %q", got)
	}
}

func TestValidSlug(t *testing.T) {
	for _, s := range []string{"a", "github", "my-server_2", strings.Repeat("a", 64), "-", "_x"} {
		if !model.ValidSlug(s) {
			t.Errorf("ValidSlug(%q) = false", s)
		}
	}
	for _, s := range []string{"", "A", "a.b", "a b", "a*", "a>", strings.Repeat("a", 65), "é", "a\n"} {
		if model.ValidSlug(s) {
			t.Errorf("ValidSlug(%q) = true", s)
		}
	}
}

func FuzzSlugify(f *testing.F) {
	for _, s := range []string{"GitHub MCP", "", "日本語", "\u212a", strings.Repeat("ab ", 40), "\xff\xfe", "a\x00b", "İstanbul"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		got := model.Slugify(name)
		if got == "" {
			return
		}
		if !model.ValidSlug(got) || len(got) > 48 || strings.HasPrefix(got, "-") || strings.HasSuffix(got, "-") || strings.Contains(got, "--") {
			t.Fatalf("Slugify(%q) = %q", name, got)
		}
		if again := model.Slugify(got); again != got {
			t.Fatalf("Slugify not idempotent: %q → %q → %q", name, got, again)
		}
	})
}

func checkToken(t *testing.T, tool, tok string) {
	t.Helper()
	if len(tok) > model.MaxTokenLen {
		t.Fatalf("ToolToken(%.40q…) is %d bytes, over %d", tool, len(tok), model.MaxTokenLen)
	}
	if tokenRE.MatchString(tool) && len(tool) <= model.MaxTokenLen {
		if tok != tool {
			t.Fatalf("ToolToken(%q) = %q, want unchanged", tool, tok)
		}
		return
	}
	if tok == tool {
		t.Fatalf("ToolToken(%q) unchanged although unsafe", tool)
	}
	if !tokenRE.MatchString(tok) || strings.ContainsAny(tok, ".*> \t\r\n") {
		t.Fatalf("ToolToken(%q) = %q is not subject-safe", tool, tok)
	}
	if !hashSuffixRE.MatchString(tok) {
		t.Fatalf("ToolToken(%q) = %q has no hash suffix", tool, tok)
	}
	if tok != model.ToolToken(tool) {
		t.Fatalf("ToolToken(%q) not stable", tool)
	}
}

func TestToolToken(t *testing.T) {
	for _, safe := range []string{"read_file", "search-repos", "A1", "x", "__", "-"} {
		if got := model.ToolToken(safe); got != safe {
			t.Errorf("ToolToken(%q) = %q, want unchanged", safe, got)
		}
	}
	clashing := []string{
		"a.b", "a_b", "a-b", "a b", "a*b", "a>b", "a\tb", "a/b", "a:b", "a..b", "a__b", "a.b.", ".a.b",
		"é", "e", "ü", "日本", "", " ", ".", "*", ">", "a_b_", "get.weather", "get_weather", "get weather",
	}
	seen := map[string]string{}
	for _, tool := range clashing {
		tok := model.ToolToken(tool)
		checkToken(t, tool, tok)
		if tok == "" {
			t.Errorf("ToolToken(%q) is empty", tool)
		}
		if prev, ok := seen[tok]; ok {
			t.Errorf("ToolToken(%q) = ToolToken(%q) = %q", tool, prev, tok)
		}
		seen[tok] = tool
	}
	// A long name (a subject past NATS's control line broke the runner's
	// connection) gets a bounded token; names up to the bound stay.
	for _, tool := range []string{strings.Repeat("a", model.MaxTokenLen+1), strings.Repeat("a", 5000), strings.Repeat("é", 100)} {
		checkToken(t, tool, model.ToolToken(tool))
	}
	if edge := strings.Repeat("b", model.MaxTokenLen); model.ToolToken(edge) != edge {
		t.Errorf("a name of %d safe bytes changed", model.MaxTokenLen)
	}
	if model.ToolToken(strings.Repeat("a", 200)) == model.ToolToken(strings.Repeat("a", 201)) {
		t.Error("two long names share a token")
	}
	if got := model.ToolToken("a.b"); !strings.HasPrefix(got, "a_b_") {
		t.Errorf("ToolToken(a.b) = %q: unreadable", got)
	}
}

func FuzzToolToken(f *testing.F) {
	for _, s := range []string{"read_file", "a.b", "a_b", "", " ", "*", ">", "a.*.>", "日本語", "\xff", "\x00", "tool\r\nname",
		strings.Repeat("x.", 100), "a\u2028b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tool string) {
		tok := model.ToolToken(tool)
		checkToken(t, tool, tok)
		// A sanitised sibling (every unsafe byte made '_') gets a different token.
		if !tokenRE.MatchString(tool) {
			sibling := strings.Map(func(r rune) rune {
				if r < utf8.RuneSelf && tokenRE.MatchString(string(r)) {
					return r
				}
				return '_'
			}, tool)
			if sibling != tool && model.ToolToken(sibling) == tok {
				t.Fatalf("ToolToken(%q) = ToolToken(%q) = %q", tool, sibling, tok)
			}
		}
	})
}

func checkNamespaced(t *testing.T, server, tool string) string {
	t.Helper()
	got := model.NamespacedName(server, tool)
	if !namespacedRE.MatchString(got) {
		t.Fatalf("NamespacedName(%q, %q) = %q does not match %s", server, tool, got, namespacedRE)
	}
	if again := model.NamespacedName(server, tool); again != got {
		t.Fatalf("NamespacedName(%q, %q) not stable: %q, %q", server, tool, got, again)
	}
	full := server + "__" + tool
	if namespacedRE.MatchString(full) {
		if got != full {
			t.Fatalf("NamespacedName(%q, %q) = %q, want %q", server, tool, got, full)
		}
	} else if !hashSuffixRE.MatchString(got) {
		t.Fatalf("NamespacedName(%q, %q) = %q: changed but no hash suffix", server, tool, got)
	}
	return got
}

func TestClashNameStable(t *testing.T) {
	a, b := model.ClashName("a__b__c", "a", "b__c"), model.ClashName("a__b__c", "a__b", "c")
	if a == b || a != model.ClashName("a__b__c", "a", "b__c") || !namespacedRE.MatchString(a) || !namespacedRE.MatchString(b) {
		t.Fatalf("clash names %q %q", a, b)
	}
	long := model.ClashName("s__"+string(make([]byte, 100)), "s", "x")
	if len(long) != model.MaxNameLen || !namespacedRE.MatchString(long) {
		t.Fatalf("long clash name %q (%d)", long, len(long))
	}
}

func TestNamespacedName(t *testing.T) {
	if got := checkNamespaced(t, "github", "search_repos"); got != "github__search_repos" {
		t.Errorf("plain = %q", got)
	}
	xy := checkNamespaced(t, "s", "x.y")
	x_y := checkNamespaced(t, "s", "x_y")
	if xy == x_y {
		t.Errorf("x.y and x_y clash: %q", xy)
	}
	if !strings.HasPrefix(xy, "s__x_y_") {
		t.Errorf("sanitised name unreadable: %q", xy)
	}
	long1 := checkNamespaced(t, "a-very-long-server-slug-name", strings.Repeat("tool_", 10)+"one")
	long2 := checkNamespaced(t, "a-very-long-server-slug-name", strings.Repeat("tool_", 10)+"two")
	if long1 == long2 || len(long1) != 64 || len(long2) != 64 {
		t.Errorf("long names: %q, %q", long1, long2)
	}
	if !strings.HasPrefix(long1, "a-very-long-server-slug-name__tool_") {
		t.Errorf("long name lost its prefix: %q", long1)
	}
	exact := strings.Repeat("s", 30) + "__" + strings.Repeat("t", 32) // 64 exactly
	if got := checkNamespaced(t, strings.Repeat("s", 30), strings.Repeat("t", 32)); got != exact {
		t.Errorf("64-char name changed: %q", got)
	}
	for _, tc := range [][2]string{{"", ""}, {"s", ""}, {"", "t"}, {"s", "日本語"}, {"s", "a b"}, {"s", strings.Repeat("é", 100)}} {
		checkNamespaced(t, tc[0], tc[1])
	}
}

func FuzzNamespacedName(f *testing.F) {
	f.Add("github", "search_repos")
	f.Add("s", "x.y")
	f.Add("s", "x_y")
	f.Add("", "")
	f.Add(strings.Repeat("s", 64), strings.Repeat("t", 64))
	f.Add("s", strings.Repeat("日", 40))
	f.Add("UPPER", "tool>*")
	f.Add("s\x00", "\xff\xfe")
	f.Add("srv", "tool\nname")
	f.Fuzz(func(t *testing.T, server, tool string) {
		got := checkNamespaced(t, server, tool)
		// Changing one unsafe byte into '_' must not give the same name.
		if i := strings.IndexAny(tool, ". */>"); i >= 0 {
			sibling := tool[:i] + "_" + tool[i+1:]
			if model.NamespacedName(server, sibling) == got {
				t.Fatalf("NamespacedName(%q, %q) and (%q, %q) clash: %q", server, tool, server, sibling, got)
			}
		}
	})
}

// With a separable slug, a namespaced name's first "__" ends its server,
// whatever the tool's name: so every reader that cuts there finds it.
func TestSeparableSlugSplitsAtFirstSeparator(t *testing.T) {
	for _, slug := range []string{"a", "a_b", "a-", "-a", "_a", "a-_b", "a_-"} {
		if !model.SeparableSlug(slug) {
			t.Errorf("SeparableSlug(%q) = false", slug)
		}
		for _, tool := range []string{"b", "_b", "__b", "b__c", "-b", "_"} {
			server, _, ok := strings.Cut(slug+"__"+tool, "__")
			if !ok || server != slug {
				t.Errorf("%s__%s cuts to server %q", slug, tool, server)
			}
		}
	}
	for _, slug := range []string{"a__b", "a_", "__", "a___", "a__"} {
		if model.SeparableSlug(slug) {
			t.Errorf("SeparableSlug(%q) = true", slug)
		}
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int{0: 1, time.Millisecond: 1, time.Second: 1, 1500 * time.Millisecond: 2, 10 * time.Second: 10} {
		if got := model.RetryAfterSeconds(d); got != want {
			t.Errorf("RetryAfterSeconds(%s) = %d, want %d", d, got, want)
		}
	}
}

// A name with no ASCII letter or digit gets a slug from its hash, stable and
// valid, instead of a refusal about a slug the user never set.
func TestNormalizeNonASCIIName(t *testing.T) {
	for _, name := range []string{"Почта", "日本語", "!!!"} {
		a := model.McpConfig{Name: name}
		a.Normalize()
		b := model.McpConfig{Name: name}
		b.Normalize()
		if !model.ValidSlug(a.Slug) || !model.SeparableSlug(a.Slug) || !strings.HasPrefix(a.Slug, "server-") || a.Slug != b.Slug {
			t.Errorf("%q: slug %q (again %q)", name, a.Slug, b.Slug)
		}
	}
	if a, b := (model.McpConfig{Name: "Почта"}), (model.McpConfig{Name: "日本語"}); func() bool { a.Normalize(); b.Normalize(); return a.Slug == b.Slug }() {
		t.Errorf("two names, one slug %q", a.Slug)
	}
}

// BenchmarkToolToken: every bus call's subject is made with ToolToken.
func BenchmarkToolToken(b *testing.B) {
	for range b.N {
		if model.ToolToken("search_repositories") == "" {
			b.Fatal("empty token")
		}
	}
}
