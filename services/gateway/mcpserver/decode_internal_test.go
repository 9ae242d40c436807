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

// exactID tells the ids a response carries as written from those go-sdk
// would answer under another number.
func TestExactID(t *testing.T) {
	for id, want := range map[string]bool{
		`"x"`: true, `null`: true, `0`: true, `-0`: true, `7`: true, `-7`: true, `1.0`: true, `1e3`: true, `1E+3`: true,
		`100e-2`: true, `0.0e99999999999999999999`: true, `9007199254740991`: true, `-9007199254740991`: true,
		`900719925474099.1e1`: true,
		`1.5`:                 false, `-0.5`: false, `1e-3`: false, `9007199254740992`: false, `9007199254740993`: false,
		`9223372036854775807`: false, `1e300`: false, `1e99999999999999999999`: false, `1.0000000000000001`: false,
		`1e-99999999999999999999`: false, `90071992547409910e-1`: true, `90071992547409911e-1`: false,
	} {
		if got := exactID([]byte(`{"jsonrpc":"2.0","id":` + id + `,"method":"ping"}`)); got != want {
			t.Errorf("id %s: exact %v, want %v", id, got, want)
		}
	}
	// The last id counts, as for a decoder; an escaped key is the same key.
	if exactID([]byte(`{"id":1,"id":1.5}`)) || exactID([]byte(`{"id":1,"\u0069d":1.5}`)) || !exactID([]byte(`{"id":1.5,"id":1}`)) {
		t.Error("exactID did not take the last id")
	}
}
