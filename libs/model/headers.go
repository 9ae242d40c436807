package model

import (
	"fmt"

	"golang.org/x/net/http/httpguts"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// CheckHeader refuses a header the runner's HTTP client could not send: a
// name that is no RFC 9110 token, a value with line breaks or control
// characters (a config that stored one would fail every start).
func CheckHeader(field, name, val string) *apierr.Error {
	if !httpguts.ValidHeaderFieldName(name) {
		return apierr.Invalid(field, fmt.Sprintf("%q is not a valid HTTP header name", name))
	}
	if !httpguts.ValidHeaderFieldValue(val) {
		return apierr.Invalid(field, "the header value is not valid: no line breaks or control characters")
	}
	return nil
}
