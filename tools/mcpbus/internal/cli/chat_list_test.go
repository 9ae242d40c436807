package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
)

// TestPrintConversations: an admin's list (several owners) has an OWNER
// column naming each conversation's principal; a user's own list has none.
func TestPrintConversations(t *testing.T) {
	at := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	var b strings.Builder
	if err := printConversations(&b, []model.ChatConversation{
		{Conversation: "c-a", Owner: "key:aaa", Entries: 3, LastActivity: at},
		{Conversation: "c-b", Owner: "key:bbb", Entries: 1, LastActivity: at},
		{Conversation: "c-old", Entries: 2, LastActivity: at},
	}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "CONVERSATION  OWNER") {
		t.Fatalf("admin list:\n%s", b.String())
	}
	for i, want := range [][2]string{{"c-a", "key:aaa"}, {"c-b", "key:bbb"}, {"c-old", "-"}} {
		if f := strings.Fields(lines[i+1]); len(f) < 2 || f[0] != want[0] || f[1] != want[1] {
			t.Errorf("row %d = %q, want %s owned by %s", i+1, lines[i+1], want[0], want[1])
		}
	}

	b.Reset()
	if err := printConversations(&b, []model.ChatConversation{{Conversation: "c-a", Owner: "key:aaa", Entries: 3, LastActivity: at}}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "OWNER") || strings.Contains(b.String(), "key:aaa") {
		t.Fatalf("a user's own list shows owners:\n%s", b.String())
	}
}
