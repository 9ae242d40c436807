package oauthflow

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/oauth2"

	"github.com/mcpbus/mcpbus/libs/model"
)

// TestCauseLeavesBodiesOut: a flow's failure is logged without the response
// body an error quotes (go-sdk quotes a registration response it cannot
// decode whole, client secret and registration token included).
func TestCauseLeavesBodiesOut(t *testing.T) {
	body := `{"client_id":"c1","client_secret":"cs-0123456789","client_id_issued_at":"yesterday"}`
	err := fmt.Errorf("registering the client: failed to decode registration response: %w (body %s)", errors.New("json: cannot unmarshal string"), body)
	got := fmt.Sprint(causeAttrs(err)...)
	if strings.Contains(got, "cs-0123456789") || !strings.Contains(got, "registering the client") {
		t.Fatalf("cause %q", got)
	}
}

// TestCauseBoundsTheOAuthErrorCode: a token endpoint's error code is its own
// text, up to the megabyte oauth2 reads: the log gets one line of at most
// model.CallEventErrorMax characters of it.
func TestCauseBoundsTheOAuthErrorCode(t *testing.T) {
	code := "invalid_grant\nlevel=ERROR msg=forged " + strings.Repeat("x", 512<<10)
	err := fmt.Errorf("exchanging the code: %w", &oauth2.RetrieveError{Response: &http.Response{StatusCode: http.StatusBadRequest}, ErrorCode: code})
	attrs := causeAttrs(err)
	var got string
	for i := 0; i+1 < len(attrs); i += 2 {
		if attrs[i] == "oauth_error" {
			got, _ = attrs[i+1].(string)
		}
	}
	if n := utf8.RuneCountInString(got); n > model.CallEventErrorMax || strings.ContainsAny(got, "\r\n") || !strings.HasPrefix(got, "invalid_grant level=ERROR") {
		t.Fatalf("oauth_error of %d characters: %.300q…", n, got)
	}
}
