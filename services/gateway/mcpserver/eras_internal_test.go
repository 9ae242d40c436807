package mcpserver

import (
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// modernRequest tells a request by the protocol version in its _meta however
// the key is spelled in JSON, and a request without it whatever its
// arguments hold (the raw check before the decode changes no answer).
func TestModernRequestByMeta(t *testing.T) {
	id, err := jsonrpc.MakeID(float64(1))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, params string
		want         bool
	}{
		{"session call", `{"name":"echo","arguments":{"message":"hi"}}`, false},
		{"key in _meta", `{"name":"echo","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}`, true},
		{"key with an escaped slash", `{"name":"echo","_meta":{"io.modelcontextprotocol\/protocolVersion":"2026-07-28"}}`, true},
		{"key with a unicode escape", `{"name":"echo","_meta":{"io.modelcontextprotocol\u002fprotocolVersion":"2026-07-28"}}`, true},
		{"key in the arguments only", `{"name":"echo","arguments":{"io.modelcontextprotocol/protocolVersion":"x"}}`, false},
		{"escapes in the arguments only", `{"name":"echo","arguments":{"message":"a \"quoted\" word"}}`, false},
		{"other _meta", `{"name":"echo","_meta":{"progressToken":1}}`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/mcp", nil)
			req := &jsonrpc.Request{ID: id, Method: "tools/call", Params: json.RawMessage(c.params)}
			if got := modernRequest(r, req); got != c.want {
				t.Fatalf("modernRequest = %v, want %v", got, c.want)
			}
		})
	}
}
