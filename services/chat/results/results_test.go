package results_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/chat/results"
)

func open(t *testing.T) (context.Context, *results.Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	js, err := jetstream.New(testkit.Connect(t, testkit.NATS(t)))
	if err != nil {
		t.Fatal(err)
	}
	s, err := results.Open(ctx, js, results.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return ctx, s
}

func TestPutGetDelete(t *testing.T) {
	ctx, s := open(t)
	big := strings.Repeat("x", 3<<20) + "END" // several chunks
	// Call ids are the model's: dots, slashes and wildcards must not matter.
	const odd = "call.*>/../x"
	for _, c := range []struct{ conv, id, text string }{{"a", odd, big}, {"a", "c2", "two"}, {"ab", "c1", "other conversation"}} {
		if err := s.Put(ctx, c.conv, c.id, c.text); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := s.Get(ctx, "a", odd); err != nil || got != big {
		t.Fatalf("get: %d bytes, %v", len(got), err)
	}
	if err := s.Put(ctx, "a", "c2", "replaced"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, "a", "c2"); err != nil || got != "replaced" {
		t.Fatalf("get after replace: %q %v", got, err)
	}
	if _, err := s.Get(ctx, "a", "nope"); apierr.Of(err) != apierr.NotFound {
		t.Fatalf("missing: %v", err)
	}
	if err := s.Put(ctx, "a.b", "c", "x"); apierr.Of(err) != apierr.Validation {
		t.Fatalf("bad conversation: %v", err)
	}

	if err := s.DeleteConversation(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{odd, "c2"} {
		if _, err := s.Get(ctx, "a", id); apierr.Of(err) != apierr.NotFound {
			t.Fatalf("%s after delete: %v", id, err)
		}
	}
	// A conversation whose id extends the deleted one's keeps its results.
	if got, err := s.Get(ctx, "ab", "c1"); err != nil || got != "other conversation" {
		t.Fatalf("other conversation: %q %v", got, err)
	}
	if err := s.DeleteConversation(ctx, "empty"); err != nil {
		t.Fatalf("deleting a conversation without results: %v", err)
	}
}
