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
