package mcpserver_test

import (
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/mcpbus/mcpbus/services/gateway/mcpserver"
)

// exactIDs are request ids a response can carry as sent: strings, and
// integers up to 2^53-1 however JSON writes them.
var exactIDs = []string{`"abc"`, `""`, `"1.5"`, `0`, `-1`, `9007199254740991`, `-9007199254740991`, `1.0`, `1e3`, `100e-2`, `-0`}

// inexactIDs are numbers go-sdk reads as a float64 and keeps as an int64:
// it would answer 1.5 as 1, 9007199254740993 as 9007199254740992, 2^63-1
// and beyond as -2^63, each another request's id.
var inexactIDs = []string{`1.5`, `-0.5`, `1e-3`, `9007199254740992`, `9007199254740993`, `9223372036854775807`,
	`12345678901234567890`, `-9223372036854775808`, `1e300`, `1.0000000000000001`}

// sameID reports whether the id of a JSON-RPC answer is want as a JSON
// value, digit for digit (not through a float64).
func sameID(t *testing.T, answer, want string) bool {
	t.Helper()
	var m struct {
		ID json.RawMessage `json:"id"`
	}
	if err := json.Unmarshal([]byte(answer), &m); err != nil || m.ID == nil {
		return false
	}
	value := func(raw string) any {
		d := json.NewDecoder(strings.NewReader(raw))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			t.Fatalf("id %s: %v", raw, err)
		}
		if n, ok := v.(json.Number); ok {
			// 1.0, 1e3, 100e-2, -0: the same numbers as 1, 1000, 1, 0.
			r, ok := new(big.Rat).SetString(string(n))
			if !ok {
				t.Fatalf("id %s: not a number", raw)
			}
			return r.RatString()
		}
		return v
	}
	return value(string(m.ID)) == value(want)
}

// A response carries its request's id (MCP: string or integer, and a
// response MUST have the same id), on the fast path and go-sdk's, in both
// eras; a numeric id no response could carry exactly is refused as an
// invalid request (-32600, no id) rather than answered under another
// request's id.
func TestIDsEchoedExactly(t *testing.T) {
	for _, noFast := range []bool{false, true} {
		e := start(t, mcpserver.Options{NoAuth: true, NoFastPath: noFast}, nil)
		e.addServer(t, "alpha", nil)
		sid := rawSession(t, e.url)
		call := func(modern bool, id string) rawResp {
			t.Helper()
			if modern {
				body := strings.Replace(modernBody(1, "tools/call", `{"name":"alpha__echo","arguments":{"message":"x"}}`), `"id":1`, `"id":`+id, 1)
				return rawWith(t, e.url, "", "", body, modernHeaders("tools/call", "alpha__echo"))
			}
			return raw(t, e.url, "", sid, `{"jsonrpc":"2.0","id":`+id+`,"method":"tools/call","params":{"name":"alpha__echo","arguments":{"message":"x"}}}`)
		}
		for _, modern := range []bool{false, true} {
			what := fmt.Sprintf("nofast=%v modern=%v", noFast, modern)
			for _, id := range exactIDs {
				r := call(modern, id)
				if r.status != http.StatusOK || r.rpcCode(t) != 0 || !sameID(t, r.message(t), id) {
					t.Errorf("%s id %s: %d %s", what, id, r.status, r.message(t))
				}
			}
			for _, id := range inexactIDs {
				r := call(modern, id)
				if r.status != http.StatusBadRequest || r.rpcCode(t) != jsonrpc.CodeInvalidRequest || strings.Contains(r.message(t), `"id"`) {
					t.Errorf("%s id %s: %d %s, want 400 with -32600 and no id", what, id, r.status, r.message(t))
				}
			}
		}
	}
}

// So over stdio too.
func TestStdioIDsEchoedExactly(t *testing.T) {
	e := start(t, mcpserver.Options{}, nil)
	p := serveLines(t, e)
	if a := p.ask(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`); a.code() != 0 {
		t.Fatalf("initialize: code %d", a.code())
	}
	p.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	for _, id := range exactIDs {
		line := `{"jsonrpc":"2.0","id":` + id + `,"method":"ping"}`
		p.send(line)
		a := p.next(line)
		if len(a) != 1 || a[0].code() != 0 || !sameID(t, `{"id":`+string(a[0].ID)+`}`, id) {
			t.Errorf("id %s: %+v", id, a)
		}
	}
	for _, id := range inexactIDs {
		a := p.ask(`{"jsonrpc":"2.0","id":` + id + `,"method":"ping"}`)
		if a.code() != jsonrpc.CodeInvalidRequest || a.ID != nil {
			t.Errorf("id %s: code %d id %s, want -32600 and no id", id, a.code(), a.ID)
		}
	}
	// The session goes on.
	if a := p.ask(`{"jsonrpc":"2.0","id":7,"method":"ping"}`); a.code() != 0 || string(a.ID) != "7" {
		t.Fatalf("ping after the refusals: %+v", a)
	}
}
