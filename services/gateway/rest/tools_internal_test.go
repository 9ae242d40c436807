package rest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

func TestSchemaCacheValidates(t *testing.T) {
	c := newSchemaCache(4)
	schema := json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer","minimum":1}},"required":["n"]}`)
	for _, ok := range []map[string]any{{"n": 3.0}, {"n": 1.0, "other": "x"}} {
		if err := c.validate(schema, ok); err != nil {
			t.Fatalf("%v: %v", ok, err)
		}
	}
	for _, bad := range []map[string]any{{}, {"n": 0.0}, {"n": 1.5}, {"n": "3"}} {
		if err := c.validate(schema, bad); err == nil {
			t.Fatalf("%v passed", bad)
		}
	}
	// Schemas the library cannot check are left to the MCP server.
	for _, s := range []string{
		`{"$schema":"http://json-schema.org/draft-04/schema#","type":"object","required":["n"]}`,
		`{"type":"object","properties":{"a":{"$ref":"https://example.com/remote.json"}}}`,
		`not json`,
		``,
	} {
		if err := c.validate(json.RawMessage(s), map[string]any{}); err != nil {
			t.Fatalf("uncheckable schema %q refused the call: %v", s, err)
		}
	}
	// The cache stays bounded.
	for i := range 20 {
		_ = c.validate(json.RawMessage(fmt.Sprintf(`{"type":"object","title":"t%d"}`, i)), map[string]any{})
	}
	if n := len(c.m); n > 4 {
		t.Fatalf("cache holds %d schemas, bound 4", n)
	}
}

func TestInvokeFailureMapping(t *testing.T) {
	for _, c := range []struct {
		err    *apierr.Error
		status int
		typ    string
	}{
		{apierr.Invalid("params", "x"), http.StatusBadRequest, ErrParameter},
		{apierr.Invalid("params.message", "x"), http.StatusBadRequest, ErrParameter},
		{apierr.Invalid("paramsx", "x"), http.StatusBadRequest, ErrValidation},
		{apierr.Invalid("tool_name", "x"), http.StatusBadRequest, ErrValidation},
		{apierr.New(apierr.NotFound, "x"), http.StatusNotFound, ErrToolMissing},
		{apierr.New(apierr.ServiceUnavailable, "x"), http.StatusServiceUnavailable, ErrUnavailable},
		{apierr.New(apierr.Network, "x"), http.StatusGatewayTimeout, ErrService},
		{apierr.New(apierr.Conflict, "x"), http.StatusConflict, ErrService},
		{apierr.New(apierr.Internal, "x"), http.StatusInternalServerError, ErrInternal},
	} {
		status, typ := invokeFailure(c.err)
		if status != c.status || typ != c.typ {
			t.Errorf("%s: got %d %s, want %d %s", c.err, status, typ, c.status, c.typ)
		}
	}
}

func TestEventKinds(t *testing.T) {
	if k, err := eventKinds(""); err != nil || len(k) != 2 || k[0] != "status" || k[1] != "call" {
		t.Fatalf("default kinds: %v %v", k, err)
	}
	if k, err := eventKinds("call, config,call"); err != nil || len(k) != 2 {
		t.Fatalf("dedupe: %v %v", k, err)
	}
	if k, err := eventKinds("oauth"); err != nil || len(k) != 1 || k[0] != "oauth" {
		t.Fatalf("oauth outcomes (the console's Authorize): %v %v", k, err)
	}
	if k, err := eventKinds("tool_changed"); err != nil || len(k) != 1 || k[0] != "tool_changed" {
		t.Fatalf("pinned tools' changes (the console's server page): %v %v", k, err)
	}
	if k, err := eventKinds("tool_reviewed,gateway"); err != nil || len(k) != 2 || k[0] != "tool_reviewed" || k[1] != "gateway" {
		t.Fatalf("reviews and the gateway's audit events: %v %v", k, err)
	}
	if _, err := eventKinds("status,secrets"); apierr.Of(err) != apierr.Validation {
		t.Fatalf("unknown kind: %v", err)
	}
}

func TestTruncateKeepsRunes(t *testing.T) {
	s := strings.Repeat("é", 10) // 2 bytes each
	got := truncate(s, 5)
	if !utf8.ValidString(got) || got != "éé…" {
		t.Fatalf("truncate: %q", got)
	}
	if truncate("short", 10) != "short" {
		t.Fatal("short strings must stay")
	}
}

// A checked result goes out framed exactly as writeJSON frames an InvokeReply.
func TestWriteInvokeResultMatchesWriteJSON(t *testing.T) {
	raw := json.RawMessage(`{"content":[{"type":"text","text":"hi"}],"isError":false}`)
	fast, slow := httptest.NewRecorder(), httptest.NewRecorder()
	writeInvokeResult(fast, raw)
	writeJSON(slow, http.StatusOK, InvokeReply{Success: true, Result: raw})
	if fast.Code != slow.Code || fast.Body.String() != slow.Body.String() {
		t.Fatalf("framed %d %q, writeJSON %d %q", fast.Code, fast.Body, slow.Code, slow.Body)
	}
	for _, h := range []string{"Content-Type", "X-Content-Type-Options"} {
		if fast.Header().Get(h) != slow.Header().Get(h) {
			t.Fatalf("%s: %q, writeJSON %q", h, fast.Header().Get(h), slow.Header().Get(h))
		}
	}
	if got := fast.Header().Get("Content-Length"); got != fmt.Sprint(fast.Body.Len()) {
		t.Fatalf("Content-Length %s for %d bytes", got, fast.Body.Len())
	}
}

// A server's schema whose $ref loops on itself would recurse in the
// validator until the stack overflows (fatal: the gateway gone): it is left
// to the server, as an uncheckable schema is.
func TestSchemaCacheLeavesLoopingSchemasToTheServer(t *testing.T) {
	c := newSchemaCache(4)
	for _, s := range []string{
		`{"type":"object","$ref":"#"}`,
		`{"type":"object","allOf":[{"$ref":"#/$defs/a"}],"$defs":{"a":{"anyOf":[{"$ref":"#"}]}}}`,
	} {
		if err := c.validate(json.RawMessage(s), map[string]any{"x": 1.0}); err != nil {
			t.Fatalf("%s refused the call: %v", s, err)
		}
	}
}
