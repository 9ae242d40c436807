package conv

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// A span name's target may be a name a client made up (a tools/call of an
// unknown tool through go-sdk, a model's tool call): it is bounded.
func TestMCPSpanNameBoundsTheTarget(t *testing.T) {
	if got := MCPSpanName("tools/call", "github__search_issues"); got != "tools/call github__search_issues" {
		t.Errorf("short target: %q", got)
	}
	if got := MCPSpanName("tools/list", ""); got != "tools/list" {
		t.Errorf("no target: %q", got)
	}
	got := MCPSpanName("tools/call", strings.Repeat("ü", 1<<19))
	if len(got) > len("tools/call ")+MaxSpanTarget || !utf8.ValidString(got) || !strings.HasSuffix(got, "…") {
		t.Errorf("1 MiB target: a name of %d bytes (valid UTF-8 %v), want at most %d ending in …",
			len(got), utf8.ValidString(got), len("tools/call ")+MaxSpanTarget)
	}
}

// A resource URI may carry a credential in its userinfo, query or
// fragment: a span records it without them.
func TestTraceURILeavesCredentialsOut(t *testing.T) {
	for in, want := range map[string]string{
		"test://greeting": "test://greeting",
		"https://user:pw@bucket.example/a/b?X-Amz-Signature=sig": "https://bucket.example/a/b",
		"https://bucket.example/a@b/c?token=t#frag":              "https://bucket.example/a@b/c",
		"postgres://u:p@db:5432":                                 "postgres://db:5432",
		"//u:p@host/x":                                           "//host/x",
		"file:///etc/hosts":                                      "file:///etc/hosts",
		"mailto:someone@example.com?subject=s":                   "mailto:someone@example.com",
		"urn:x:y#secret":                                         "urn:x:y",
		"not a uri // x@y":                                       "not a uri // x@y",
	} {
		if got := TraceURI(in); got != want {
			t.Errorf("TraceURI(%q) = %q, want %q", in, got, want)
		}
	}
}
