package mcpserver

import (
	"reflect"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

var decodeCases = []string{
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a__echo","arguments":{"text":"hi"},"_meta":{"progressToken":7}}}`,
	`{"jsonrpc":"2.0","id":"x-1","method":"tools/list"}`,
	`{"jsonrpc":"2.0","id":1.0,"method":"ping"}`,
	`{"jsonrpc":"2.0","id":1.5,"method":"ping"}`,
	`{"jsonrpc":"2.0","id":null,"method":"ping"}`,
	`{"jsonrpc":"2.0","id":true,"method":"ping"}`,
	`{"jsonrpc":"2.0","id":{},"method":"ping"}`,
	`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
	`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}`,
	`{"jsonrpc":"2.0","id":1,"method":""}`,
	`{"jsonrpc":"2.0","id":1,"method":5}`,
	`{"jsonrpc":"2.0","id":1,"Method":"ping"}`,
	`{"JSONRPC":"2.0","id":1,"method":"ping"}`,
	`{"jsonrpc":"1.0","id":1,"method":"ping"}`,
	`{"id":1,"method":"ping"}`,
	`{"jsonrpc":"2.0","id":1,"method":"ping","error":5}`,
	`{"jsonrpc":"2.0","id":1,"method":"ping","result":{"a":1},"error":{"code":1,"message":"m"}}`,
	`{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/list"}`,
	`{"jsonrpc":"2.0","id":1,"result":{}}`,
	`{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no"}}`,
	`{"jsonrpc":"2.0","id":1,"method":"ping"} trailing`,
	`{"jsonrpc":"2.0","id":1,"method":"ping"}{"jsonrpc":"2.0","id":2,"method":"ping"}`,
	`  {"jsonrpc":"2.0","id":1,"method":"ping"}  `,
	`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`,
	`{"jsonrpc":"2.0","id":1,"method":"ping","params":` + strings.Repeat("[", 1001) + strings.Repeat("]", 1001) + `}`,
	`{"jsonrpc":"2.0","id":1,"method":"ping","params":` + strings.Repeat("[", 999) + strings.Repeat("]", 999) + `}`,
	`{"jsonrpc":"2.0","id":1,"method":"p\u0069ng","params":{"s":"]]]\"{{"}}`,
	`{"jsonrpc":"2.0","id":1,"method":"ping",}`,
	`not json`,
	``,
}

// decodeMessage must give what go-sdk's jsonrpc.DecodeMessage gives, for
// requests it decodes itself and for everything it hands over.
func TestDecodeMessageMatchesGoSDK(t *testing.T) {
	for _, in := range decodeCases {
		checkDecodeMatches(t, []byte(in))
	}
	// The common request is decoded here, not handed to go-sdk: otherwise
	// the saving is gone (and the comparison above proves nothing of it).
	if decodeRequest([]byte(decodeCases[0])) == nil {
		t.Fatal("a plain tools/call was handed to go-sdk's decoder")
	}
}

func FuzzDecodeMessage(f *testing.F) {
	for _, in := range decodeCases {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkDecodeMatches(t, data) })
}

func checkDecodeMatches(t *testing.T, data []byte) {
	t.Helper()
	want, werr := jsonrpc.DecodeMessage(data)
	got, gerr := decodeMessage(data)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("%q: go-sdk error %v, ours %v", data, werr, gerr)
	}
	if !reflect.DeepEqual(normalize(got), normalize(want)) {
		t.Fatalf("%q: go-sdk %#v, ours %#v", data, want, got)
	}
}

// normalize makes empty and absent raw params compare equal (both mean none).
func normalize(m jsonrpc.Message) jsonrpc.Message {
	if r, ok := m.(*jsonrpc.Request); ok && len(r.Params) == 0 {
		c := *r
		c.Params = nil
		return &c
	}
	return m
}
