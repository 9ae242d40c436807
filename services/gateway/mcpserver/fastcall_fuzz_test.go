package mcpserver

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// FuzzFastPathDecode feeds arbitrary POST bodies through what the fast path
// decodes before it decides: go-sdk's message decoder, the tools/call params,
// the id key and the result check. None may panic; what callParams accepts
// has a name, and ids of different types never share a key.
func FuzzFastPathDecode(f *testing.F) {
	for _, seed := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a__echo","arguments":{"message":"hi"}}}`,
		`{"jsonrpc":"2.0","id":"1","method":"tools/call","params":{"name":"a__echo","_meta":{"progressToken":"p","traceparent":"00-x"}}}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"Name":"a__echo"}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":[1,2]}`,
		`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`,
		`{"content":[{"type":"text","text":"x"}]}`,
		`{"content":null}`,
		`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"a__echo","na\u006de":"b__echo","arguments":{"x":1},"arguments":null}}`,
		`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"_meta":null,"name":"a__echo","requestState":"s"}}`,
		`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":7}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		_, _ = toolResult(body)
		msg, err := jsonrpc.DecodeMessage(body)
		if err != nil {
			return
		}
		req, ok := msg.(*jsonrpc.Request)
		if !ok {
			return
		}
		name, args, meta, ok := callParams(req.Params)
		if ok && name == "" {
			t.Fatalf("callParams accepted %s without a name", req.Params)
		}
		// The member walk reads what a map of the members reads.
		dName, dArgs, dMeta, dOK := callParamsDecoded(req.Params)
		if ok != dOK || name != dName || !bytes.Equal(args, dArgs) || !reflect.DeepEqual(meta, dMeta) {
			t.Fatalf("params %s: walk %q %s %v %v, map %q %s %v %v", req.Params, name, args, meta, ok, dName, dArgs, dMeta, dOK)
		}
		var p cancelledParams
		if json.Unmarshal(req.Params, &p) == nil && p.RequestID != nil {
			if id, err := jsonrpc.MakeID(p.RequestID); err == nil {
				_ = idString(id)
			}
		}
		if req.ID.IsValid() {
			k := idString(req.ID)
			if k == "" {
				t.Fatalf("id %v has no key", req.ID.Raw())
			}
			if _, isStr := req.ID.Raw().(string); isStr != (k[0] == 's') {
				t.Fatalf("id %v keyed %q", req.ID.Raw(), k)
			}
		}
	})
}
