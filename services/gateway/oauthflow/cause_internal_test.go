package oauthflow

import (
	"errors"
	"fmt"
	"strings"
	"testing"
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
