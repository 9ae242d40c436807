// Package apierr is the error contract shared by every mcpbus surface: the
// bus reply body, the HTTP body and the CLI's --json output all carry
// {"code","message","field"}.
package apierr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// Code is one of the fixed error codes of the contract.
type Code string

// The codes of the contract (docs/design.md). Each maps to one HTTP status.
const (
	Validation         Code = "VALIDATION_ERROR"
	NotFound           Code = "NOT_FOUND"
	Conflict           Code = "CONFLICT"
	Unauthorized       Code = "UNAUTHORIZED"
	RateLimited        Code = "RATE_LIMITED"
	Network            Code = "NETWORK_ERROR"
	ServiceUnavailable Code = "SERVICE_UNAVAILABLE"
	Internal           Code = "INTERNAL_ERROR"
)

var httpStatus = map[Code]int{
	Validation:         http.StatusBadRequest,
	NotFound:           http.StatusNotFound,
	Conflict:           http.StatusConflict,
	Unauthorized:       http.StatusUnauthorized,
	RateLimited:        http.StatusTooManyRequests,
	Network:            http.StatusGatewayTimeout,
	ServiceUnavailable: http.StatusServiceUnavailable,
	Internal:           http.StatusInternalServerError,
}

// HTTPStatus is the HTTP status of the code (500 for an unknown code).
func (c Code) HTTPStatus() int {
	if s, ok := httpStatus[c]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// Valid reports whether c is one of the contract's codes.
func (c Code) Valid() bool {
	_, ok := httpStatus[c]
	return ok
}

// CodeForStatus is the inverse of HTTPStatus, for replies that only carry a status.
func CodeForStatus(status int) Code {
	for c, s := range httpStatus {
		if s == status {
			return c
		}
	}
	return Internal
}

// Error is the contract's error. It wraps an optional cause that is never
// serialised (causes may hold details not meant for callers).
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
	cause   error
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s: %s (field %s)", e.Code, e.Message, e.Field)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Unwrap exposes the cause to errors.Is/As.
func (e *Error) Unwrap() error { return e.cause }

// Is makes errors.Is(err, &Error{Code: X}) match any error of code X.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Message == "" && t.Code == e.Code
}

// JSON is the serialised body.
func (e *Error) JSON() []byte {
	b, _ := json.Marshal(e) // cannot fail: three strings
	return b
}

// New makes an error with a code and a message.
func New(code Code, message string) *Error { return &Error{Code: code, Message: message} }

// Newf makes an error with a formatted message.
func Newf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Wrap makes an error of code with message that keeps cause for errors.Is/As.
func Wrap(code Code, message string, cause error) *Error {
	return &Error{Code: code, Message: message, cause: cause}
}

// Invalid is a VALIDATION_ERROR about one field.
func Invalid(field, message string) *Error {
	return &Error{Code: Validation, Message: message, Field: field}
}

// WithField returns a copy of e naming field.
func (e *Error) WithField(field string) *Error {
	c := *e
	c.Field = field
	return &c
}

// Of reports the code of err: the code of an *Error in its chain, else the
// mapping of well-known Go errors, else INTERNAL_ERROR; "" for nil.
func Of(err error) Code {
	if err == nil {
		return ""
	}
	return From(err).Code
}

// From turns any error into the contract. Errors that are not *Error keep
// their text as the message only for the context errors that callers expect;
// anything else becomes INTERNAL_ERROR with the error text.
func From(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return Wrap(Network, "timed out", err)
	case errors.Is(err, context.Canceled):
		return Wrap(Network, "cancelled", err)
	}
	return Wrap(Internal, err.Error(), err)
}

// Parse decodes a contract body. It reports false when data is not one.
func Parse(data []byte) (*Error, bool) {
	var e Error
	if err := json.Unmarshal(data, &e); err != nil || e.Code == "" || e.Message == "" {
		return nil, false
	}
	if !e.Code.Valid() {
		e.Code = Internal
	}
	return &e, true
}
