package runner

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/runner/internal/launch"
)

// The error of a call event: the reply's message with the server's secrets
// redacted (also one cut at the length limit), on one line, within
// model.CallEventErrorMax characters.
func TestEventErrorRedactsAndBounds(t *testing.T) {
	const secret = "sk-live-0123456789abcdef"
	s := &server{}
	s.redactor.Store(launch.NewRedactor([]string{secret}))

	got := s.eventError(apierr.New(apierr.ServiceUnavailable, "tool x failed:\n  bad token "+secret+"\r\n\tretry\x00later"))
	if want := "tool x failed: bad token " + launch.Redacted + " retry later"; got != want {
		t.Fatalf("eventError = %q, want %q", got, want)
	}
	// A long message is cut after redaction: no prefix of the secret survives the cut.
	long := strings.Repeat("é", model.CallEventErrorMax-10) + " " + secret + strings.Repeat("z", 50)
	got = s.eventError(errors.New(long))
	if n := utf8.RuneCountInString(got); n != model.CallEventErrorMax || !strings.HasSuffix(got, "…") {
		t.Fatalf("long message: %d characters %q", n, got)
	}
	if strings.Contains(got, secret[:8]) {
		t.Fatalf("the cut kept part of the secret: %q", got)
	}
	// Without a known secret (none resolved) the message passes, one line.
	if got := (&server{}).eventError(apierr.New(apierr.NotFound, "server a has no tool \"b\"")); got != `server a has no tool "b"` {
		t.Fatalf("plain message: %q", got)
	}
}
