package apierr_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// contract is the table of docs/design.md: every code and its HTTP status.
var contract = []struct {
	code   apierr.Code
	status int
}{
	{apierr.Validation, http.StatusBadRequest},
	{apierr.NotFound, http.StatusNotFound},
	{apierr.Conflict, http.StatusConflict},
	{apierr.Unauthorized, http.StatusUnauthorized},
	{apierr.RateLimited, http.StatusTooManyRequests},
	{apierr.Network, http.StatusGatewayTimeout},
	{apierr.ServiceUnavailable, http.StatusServiceUnavailable},
	{apierr.Internal, http.StatusInternalServerError},
}

func TestCodeStrings(t *testing.T) {
	want := map[apierr.Code]string{
		apierr.Validation: "VALIDATION_ERROR", apierr.NotFound: "NOT_FOUND", apierr.Conflict: "CONFLICT",
		apierr.Unauthorized: "UNAUTHORIZED", apierr.RateLimited: "RATE_LIMITED", apierr.Network: "NETWORK_ERROR",
		apierr.ServiceUnavailable: "SERVICE_UNAVAILABLE", apierr.Internal: "INTERNAL_ERROR",
	}
	for c, s := range want {
		if string(c) != s {
			t.Errorf("code %q, want %q", c, s)
		}
	}
}

func TestCodeHTTPStatusBothWays(t *testing.T) {
	for _, tc := range contract {
		if got := tc.code.HTTPStatus(); got != tc.status {
			t.Errorf("%s.HTTPStatus() = %d, want %d", tc.code, got, tc.status)
		}
		if got := apierr.CodeForStatus(tc.status); got != tc.code {
			t.Errorf("CodeForStatus(%d) = %s, want %s", tc.status, got, tc.code)
		}
		if !tc.code.Valid() {
			t.Errorf("%s.Valid() = false", tc.code)
		}
	}
}

func TestUnknownCodeAndStatus(t *testing.T) {
	for _, c := range []apierr.Code{"", "BOGUS", "not_found", "validation_error"} {
		if c.Valid() {
			t.Errorf("%q.Valid() = true", c)
		}
		if got := c.HTTPStatus(); got != http.StatusInternalServerError {
			t.Errorf("%q.HTTPStatus() = %d, want 500", c, got)
		}
	}
	for _, s := range []int{0, -1, 200, 204, 302, 402, 418, 502, 999} {
		if got := apierr.CodeForStatus(s); got != apierr.Internal {
			t.Errorf("CodeForStatus(%d) = %s, want INTERNAL_ERROR", s, got)
		}
	}
}

func TestErrorText(t *testing.T) {
	if got := apierr.New(apierr.NotFound, "no such server").Error(); got != "NOT_FOUND: no such server" {
		t.Errorf("Error() = %q", got)
	}
	if got := apierr.Invalid("name", "Name is required").Error(); got != "VALIDATION_ERROR: Name is required (field name)" {
		t.Errorf("Error() = %q", got)
	}
	if got := apierr.Newf(apierr.Conflict, "slug %s taken by %d", "x", 2); got.Message != "slug x taken by 2" || got.Code != apierr.Conflict {
		t.Errorf("Newf = %+v", got)
	}
}

func TestWithFieldCopies(t *testing.T) {
	orig := apierr.New(apierr.Conflict, "taken")
	withField := orig.WithField("slug")
	if withField == orig || orig.Field != "" || withField.Field != "slug" || withField.Code != apierr.Conflict || withField.Message != "taken" {
		t.Fatalf("WithField: orig %+v, copy %+v", orig, withField)
	}
	cause := errors.New("root cause")
	w := apierr.Wrap(apierr.Network, "down", cause).WithField("url")
	if !errors.Is(w, cause) {
		t.Fatal("WithField lost the cause")
	}
}

func TestFrom(t *testing.T) {
	if apierr.From(nil) != nil {
		t.Fatal("From(nil) != nil")
	}
	if apierr.Of(nil) != "" {
		t.Fatalf("Of(nil) = %q", apierr.Of(nil))
	}

	inner := apierr.Invalid("slug", "bad slug")
	wrapped := fmt.Errorf("layer 2: %w", fmt.Errorf("layer 1: %w", inner))
	if got := apierr.From(wrapped); got != inner {
		t.Fatalf("From(wrapped) = %v, want the inner *Error", got)
	}
	if apierr.Of(wrapped) != apierr.Validation {
		t.Fatalf("Of(wrapped) = %s", apierr.Of(wrapped))
	}
	// errors.Join also forms a chain.
	if got := apierr.Of(errors.Join(io.EOF, apierr.New(apierr.NotFound, "x"))); got != apierr.NotFound {
		t.Fatalf("Of(join) = %s", got)
	}

	dl := apierr.From(fmt.Errorf("waiting: %w", context.DeadlineExceeded))
	if dl.Code != apierr.Network || !errors.Is(dl, context.DeadlineExceeded) {
		t.Fatalf("From(deadline) = %+v", dl)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 0)
	defer cancel()
	<-ctx.Done()
	if got := apierr.Of(ctx.Err()); got != apierr.Network {
		t.Fatalf("Of(ctx deadline) = %s", got)
	}
	if got := apierr.From(context.Canceled); got.Code != apierr.Network || !errors.Is(got, context.Canceled) {
		t.Fatalf("From(canceled) = %+v", got)
	}

	unknown := errors.New("disk on fire")
	u := apierr.From(unknown)
	if u.Code != apierr.Internal || u.Message != "disk on fire" || !errors.Is(u, unknown) {
		t.Fatalf("From(unknown) = %+v", u)
	}
	// The cause never reaches the wire.
	if string(u.JSON()) != `{"code":"INTERNAL_ERROR","message":"disk on fire"}` {
		t.Fatalf("JSON = %s", u.JSON())
	}
}

func TestErrorsIsSemantics(t *testing.T) {
	e := apierr.New(apierr.NotFound, "server x not found")
	wrapped := fmt.Errorf("call: %w", e)
	if !errors.Is(wrapped, &apierr.Error{Code: apierr.NotFound}) {
		t.Error("errors.Is by code (empty message) failed")
	}
	if errors.Is(wrapped, &apierr.Error{Code: apierr.Conflict}) {
		t.Error("errors.Is matched another code")
	}
	// A target with a message is not a code pattern: only identity matches.
	if errors.Is(wrapped, &apierr.Error{Code: apierr.NotFound, Message: "server x not found"}) {
		t.Error("errors.Is matched a distinct target with a message")
	}
	if !errors.Is(wrapped, e) {
		t.Error("errors.Is(identity) failed")
	}
	if errors.Is(wrapped, io.EOF) {
		t.Error("matched an unrelated error")
	}
	var target *apierr.Error
	if !errors.As(wrapped, &target) || target != e {
		t.Error("errors.As failed")
	}
	cause := fmt.Errorf("dial: %w", io.ErrUnexpectedEOF)
	w := apierr.Wrap(apierr.Network, "unreachable", cause)
	if !errors.Is(w, io.ErrUnexpectedEOF) || errors.Unwrap(w) != cause {
		t.Error("Wrap does not expose its cause")
	}
	if apierr.New(apierr.Internal, "x").Unwrap() != nil {
		t.Error("New has a cause")
	}
}

func TestJSONRoundTrip(t *testing.T) {
	for _, e := range []*apierr.Error{
		apierr.New(apierr.NotFound, "not here"),
		apierr.Invalid("servers[0].name", "Name is required"),
		apierr.New(apierr.Internal, "quotes \" and\nnewlines and unicode ✓ \u2028"),
	} {
		var m map[string]any
		if err := json.Unmarshal(e.JSON(), &m); err != nil {
			t.Fatalf("JSON() invalid: %v", err)
		}
		if _, ok := m["field"]; ok != (e.Field != "") {
			t.Errorf("field presence in %s", e.JSON())
		}
		if len(m) != 2+map[bool]int{true: 1}[e.Field != ""] {
			t.Errorf("unexpected keys in %s", e.JSON())
		}
		got, ok := apierr.Parse(e.JSON())
		if !ok || *got != *e {
			t.Errorf("round trip of %s: %+v %v", e.JSON(), got, ok)
		}
		// json.Marshal of the value gives the same body.
		b, err := json.Marshal(e)
		if err != nil || string(b) != string(e.JSON()) {
			t.Errorf("Marshal = %s, %v; JSON = %s", b, err, e.JSON())
		}
	}
}

func TestParse(t *testing.T) {
	good := []struct {
		in   string
		want apierr.Error
	}{
		{`{"code":"NOT_FOUND","message":"no"}`, apierr.Error{Code: apierr.NotFound, Message: "no"}},
		{`{"code":"VALIDATION_ERROR","message":"bad","field":"name"}`, apierr.Error{Code: apierr.Validation, Message: "bad", Field: "name"}},
		{` {"message":"m","code":"CONFLICT","extra":1} `, apierr.Error{Code: apierr.Conflict, Message: "m"}},
		// An unknown code is still an error body, reported as INTERNAL_ERROR.
		{`{"code":"TEAPOT","message":"short and stout"}`, apierr.Error{Code: apierr.Internal, Message: "short and stout"}},
		{`{"code":"not_found","message":"lower case"}`, apierr.Error{Code: apierr.Internal, Message: "lower case"}},
	}
	for _, tc := range good {
		got, ok := apierr.Parse([]byte(tc.in))
		if !ok {
			t.Errorf("Parse(%s) not ok", tc.in)
			continue
		}
		if *got != tc.want {
			t.Errorf("Parse(%s) = %+v, want %+v", tc.in, *got, tc.want)
		}
	}
	bad := []string{
		``, `null`, `{}`, `[]`, `"NOT_FOUND"`, `42`, `{"code":"NOT_FOUND"}`, `{"message":"no code"}`,
		`{"code":"NOT_FOUND","message":""}`, `{"code":"","message":"x"}`, `{"code":1,"message":"x"}`,
		`{"code":"NOT_FOUND","message":"x"`, `{"content":[{"type":"text","text":"ok"}]}`, "\xff\xfe",
	}
	for _, in := range bad {
		if e, ok := apierr.Parse([]byte(in)); ok || e != nil {
			t.Errorf("Parse(%q) = %+v, %v; want not an error body", in, e, ok)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"code":"NOT_FOUND","message":"no"}`,
		`{"code":"VALIDATION_ERROR","message":"Name is required","field":"name"}`,
		`{"code":"TEAPOT","message":"x"}`,
		`{"code":"NOT_FOUND"}`,
		`{"code":"NOT_FOUND","message":"a","code":"CONFLICT"}`,
		`{"code":"NOT_FOUND","message":"\ud800"}`,
		`{"code":"NOT_FOUND","message":"\u0000\n\r"}`,
		`{"CODE":"NOT_FOUND","Message":"case-insensitive keys"}`,
		`{"code":"NOT_FOUND","message":"x","field":null}`,
		"{\"code\":\"NOT_FOUND\",\"message\":\"\xff\"}",
		`{"code":["x"],"message":"y"}`,
		`[{"code":"NOT_FOUND","message":"no"}]`,
		`null`, ``, `{`, `{}`, "\x00", `{"content":[],"isError":true}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		e, ok := apierr.Parse(data)
		if !ok {
			if e != nil {
				t.Fatalf("not ok but error %+v", e)
			}
			return
		}
		if e == nil || e.Message == "" || !e.Code.Valid() {
			t.Fatalf("ok but %+v", e)
		}
		again, ok := apierr.Parse(e.JSON())
		if !ok {
			t.Fatalf("re-encoded body %s does not parse", e.JSON())
		}
		if *again != *e {
			t.Fatalf("round trip: %+v != %+v", *again, *e)
		}
	})
}
