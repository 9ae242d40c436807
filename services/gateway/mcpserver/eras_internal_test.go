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

// A server's result may say any resultType: the runner keeps the member (a
// 2026-07-28 upstream's "complete") and drops the others a typed result
// would need (task, inputRequests, requestState). Passed on, "task" or
// "input_required" told a client of 2026-07-28 of a task or of requests
// that are not there, and an older client of a field of an era it does not
// speak. The client gets the gateway's resultType alone, on either path.
func TestUpstreamResultTypeIsNotTheClients(t *testing.T) {
	info := json.RawMessage(`{"name":"mcpbus","version":"1"}`)
	for _, rt := range []string{`"task"`, `"input_required"`, `"x"`, `7`, `"complete"`} {
		for _, raw := range []string{
			`{"content":[{"type":"text","text":"hi"}],"resultType":` + rt + `}`,
			`{"content":[],"resultType":` + rt + `,"_meta":{"resultType":1}}`,
			`{"result\u0054ype":` + rt + `,"content":[]}`, // the decoding path
		} {
			for _, si := range []json.RawMessage{info, nil} {
				out, err := eraResult([]byte(raw), si)
				if err != nil {
					t.Fatalf("%s: %v", raw, err)
				}
				var got map[string]json.RawMessage
				if err := json.Unmarshal(out, &got); err != nil {
					t.Fatalf("%s: %s", raw, out)
				}
				want := ""
				if si != nil {
					want = `"complete"`
				}
				if string(got["resultType"]) != want {
					t.Errorf("%s (modern %v): %s, want resultType %s", raw, si != nil, out, want)
				}
			}
		}
	}
}
