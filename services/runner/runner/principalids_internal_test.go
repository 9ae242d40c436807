package runner

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
)

// TestPrincipalIDsRemembered: a call reads its principal two to four times,
// and the gateway sends the same header value on every call of a key: after
// the first decode, a read makes no object (it made ~7 each, a base64 and a
// JSON decode), and it answers as principal.Decode does.
func TestPrincipalIDsRemembered(t *testing.T) {
	r := &Runner{}
	h := nats.Header{}
	principal.Set(h, principal.Key("k1", false, model.ToolFilter{Allow: []string{"bench__*"}}))
	v := h.Get(principal.Header)
	want, err := principal.Decode(v)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if id, err := r.callerPrincipal(caller{}, h); err != nil || id != want.ID {
			t.Fatalf("callerPrincipal = %q, %v; want %q", id, err, want.ID)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = r.callerPrincipal(caller{}, h) }); n != 0 {
		t.Errorf("reading a principal seen before makes %v objects, want 0", n)
	}
	// The subject's agent wins over the header; no header is the operator's "".
	if id, _ := r.callerPrincipal(caller{agent: "a1"}, h); id != "agent:a1" {
		t.Errorf("an agent's call reads as %q", id)
	}
	if id, err := r.callerPrincipal(caller{}, nats.Header{}); id != "" || err != nil {
		t.Errorf("no header reads as %q, %v", id, err)
	}
}

func TestPrincipalIDsRefuseWhatDoesNotDecode(t *testing.T) {
	var p principalIDs
	for _, v := range []string{"!!", principal.Principal{ID: "x", Kind: "key"}.Encode(), strings.Repeat("A", 20<<10)} {
		for range 2 { // a second read is refused too: an error is never kept
			if id, err := p.of(v); err == nil {
				t.Errorf("header %.20q… read as %q, want an error", v, id)
			}
		}
	}
	if len(p.ids) != 0 {
		t.Errorf("%d values that do not decode were kept", len(p.ids))
	}
}

func TestPrincipalIDsBounded(t *testing.T) {
	var p principalIDs
	for i := range maxPrincipalIDs*3 + 7 {
		pr := principal.Key(fmt.Sprint("k", i), false, model.ToolFilter{})
		if id, err := p.of(pr.Encode()); err != nil || id != pr.ID {
			t.Fatalf("key %d read as %q, %v", i, id, err)
		}
		if len(p.ids) > maxPrincipalIDs {
			t.Fatalf("%d values kept, at most %d", len(p.ids), maxPrincipalIDs)
		}
	}
	// A long value (a wide tool filter) is decoded each time, never kept.
	long := principal.Key("wide", false, model.ToolFilter{Allow: []string{strings.Repeat("t", 4<<10)}})
	p.ids = nil
	if id, err := p.of(long.Encode()); err != nil || id != long.ID || len(p.ids) != 0 {
		t.Errorf("a %d-byte value: %q, %v, %d kept", len(long.Encode()), id, err, len(p.ids))
	}
}
