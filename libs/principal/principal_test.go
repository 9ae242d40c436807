package principal

import (
	"context"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

func TestHeaderRoundTrip(t *testing.T) {
	for _, p := range []Principal{
		Key("k1", false, model.ToolFilter{Deny: []string{"*"}}),
		Key("k2", true, model.ToolFilter{}),
		OAuth("https://idp.example", "alice@example.com", false, model.ToolFilter{Allow: []string{"gh__*"}}),
		Operator(),
	} {
		h := nats.Header{}
		Set(h, p)
		got, err := FromHeader(h)
		if err != nil || got.ID != p.ID || got.Kind != p.Kind || got.Admin != p.Admin || (got.Tools == nil) != (p.Tools == nil) {
			t.Fatalf("%+v came back as %+v, %v", p, got, err)
		}
		if strings.ContainsAny(h.Get(Header), "\r\n") {
			t.Fatalf("a header value with a line break: %q", h.Get(Header))
		}
	}
	if p, err := FromHeader(nats.Header{}); err != nil || p.ID != "operator" || !p.Admin {
		t.Fatalf("no header: %+v %v, want the operator", p, err)
	}
}

func TestDecodeRefuses(t *testing.T) {
	forged := func(p Principal) string { return p.Encode() }
	for name, v := range map[string]string{
		"not base64":         "%%%",
		"not json":           "bm90IGpzb24",
		"unknown kind":       forged(Principal{ID: "root:x", Kind: "root"}),
		"id of another kind": forged(Principal{ID: "oauth:x", Kind: KindKey}),
		"empty id":           forged(Principal{ID: "key:", Kind: KindKey}),
		"operator by name":   forged(Principal{ID: "key:operator", Kind: KindOperator}),
		"too long":           strings.Repeat("A", maxHeader+1),
	} {
		if _, err := Decode(v); apierr.Of(err) != apierr.Validation {
			t.Errorf("%s: %v, want VALIDATION_ERROR", name, err)
		}
	}
}

func TestToolsAndContext(t *testing.T) {
	none := Key("k", false, model.ToolFilter{Deny: []string{"*"}})
	if none.AllowsTool("everything__echo") {
		t.Fatal("a deny-all key allows a tool")
	}
	if all := Key("k", false, model.ToolFilter{}); all.Tools != nil || !all.AllowsTool("everything__echo") {
		t.Fatal("a key without a filter must allow every tool")
	}
	if _, ok := From(context.Background()); ok {
		t.Fatal("a bare context carries a principal")
	}
	if p, ok := From(With(context.Background(), none)); !ok || p.ID != "key:k" {
		t.Fatalf("From(With) = %+v %v", p, ok)
	}
}
