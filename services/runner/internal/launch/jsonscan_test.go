package launch

import (
	"bufio"
	"bytes"
	"encoding/json"
	"maps"
	"strings"
	"testing"
	"testing/iotest"
)

// members agrees with encoding/json on the top-level members of valid objects.
func TestMembers(t *testing.T) {
	docs := []string{
		`{}`, ` { } `,
		`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"}\"]{"}]}}`,
		`{"id":"mcpbus-7","result":{"a":[1,2,{"b":"c\\\"}"}]},"jsonrpc":"2.0"}`,
		"{\n \"method\" : \"notifications/progress\" ,\t\"params\":{\"x\":null},\"n\":-1.5e3,\"t\":true,\"f\":false}",
		`{"error":{"code":-32602,"message":"unknown tool \"x\""},"id":"mcpbus-1","jsonrpc":"2.0"}`,
		`{"k\"ey":"v","":[[]],"u":"\u00e9\ud83d\ude00"}`,
	}
	for _, d := range docs {
		var want map[string]json.RawMessage
		if err := json.Unmarshal([]byte(d), &want); err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		checkMembers(t, d, want)
	}
	for _, bad := range []string{``, `[]`, `"x"`, `{`, `{"a"}`, `{"a":}`, `{"a":1`, `{"a":"x}`, `{"a":[1}`, `{"a":1 "b":2}`, `{1:2}`} {
		if members([]byte(bad), func(k, v []byte) bool { return true }) {
			t.Errorf("%q accepted", bad)
		}
	}
}

// checkMembers fails t unless members finds in d the members of want (d
// decoded by encoding/json), with the same values.
func checkMembers(t *testing.T, d string, want map[string]json.RawMessage) {
	t.Helper()
	got := map[string]json.RawMessage{}
	ok := members([]byte(d), func(k, v []byte) bool {
		var key string
		if err := json.Unmarshal(append(append([]byte{'"'}, k...), '"'), &key); err != nil {
			t.Fatalf("key %s: %v", k, err)
		}
		got[key] = json.RawMessage(v)
		return true
	})
	if !ok {
		t.Fatalf("%s: not scanned", d)
	}
	for k := range want {
		w, _ := json.Marshal(want[k])
		g, _ := json.Marshal(got[k])
		if !bytes.Equal(w, g) {
			t.Errorf("%s: member %q = %s, want %s", d, k, got[k], want[k])
		}
	}
	if !maps.EqualFunc(want, got, func(a, b json.RawMessage) bool { return true }) {
		t.Errorf("%s: keys %v, want %v", d, got, want)
	}
}

// FuzzMembers: on any valid JSON object the scanner agrees with
// encoding/json; on anything else it must not panic.
func FuzzMembers(f *testing.F) {
	for _, s := range []string{`{}`, `{"id":"mcpbus-1","result":{"a":[1,"]}"]}}`, `{"k\"":[{}],"n":-1e3}`, `{"a":`, `[1]`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, d string) {
		var want map[string]json.RawMessage
		if json.Unmarshal([]byte(d), &want) != nil || want == nil {
			members([]byte(d), func(k, v []byte) bool { return true })
			return
		}
		checkMembers(t, d, want)
	})
}

func TestParseRawID(t *testing.T) {
	for in, want := range map[string]uint64{`"mcpbus-1"`: 1, `"mcpbus-18446744073709551615"`: 1<<64 - 1} {
		if n, ok := parseRawID([]byte(in)); !ok || n != want {
			t.Errorf("%s: %d %v", in, n, ok)
		}
	}
	for _, in := range []string{`1`, `"1"`, `"mcpbus-"`, `"mcpbus-x"`, `"mcpbus-1x"`, `"mcpbus-1`, `"MCPBUS-1"`, `null`, `"mcpbus--1"`} {
		if _, ok := parseRawID([]byte(in)); ok {
			t.Errorf("%s taken for a raw id", in)
		}
	}
}

// readLine returns short and long lines whole, across reads of any size,
// and refuses a line over the limit.
func TestReadLine(t *testing.T) {
	long := strings.Repeat("z", 300)
	input := "a\n" + long + "\n\nlast"
	br := bufio.NewReaderSize(iotest.OneByteReader(strings.NewReader(input)), 16)
	var buf []byte
	var got []string
	for {
		line, err := readLine(br, &buf, 1000)
		if err != nil {
			break
		}
		got = append(got, strings.TrimRight(string(line), "\n"))
	}
	if strings.Join(got, "|") != "a|"+long+"||last" {
		t.Fatalf("lines %q", got)
	}
	br = bufio.NewReaderSize(strings.NewReader(long+"\n"), 16)
	if _, err := readLine(br, &buf, 100); err == nil || !strings.Contains(err.Error(), "over the limit") {
		t.Fatalf("over-long line: %v", err)
	}
}

func TestAppendToolCall(t *testing.T) {
	meta := []byte(`"io.modelcontextprotocol/protocolVersion":"2026-07-28"`)
	cases := []struct {
		name, args string
		reqMeta    *[]byte
		meta       string
		want       string
	}{
		{"echo", `{"message":"hi"}`, nil, "",
			`{"jsonrpc":"2.0","id":"mcpbus-3","method":"tools/call","params":{"name":"echo","arguments":{"message":"hi"}}}`},
		{"echo", "", &meta, `"traceparent":"t"`,
			`{"jsonrpc":"2.0","id":"mcpbus-3","method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","traceparent":"t"},"name":"echo","arguments":{}}}`},
		{"we\"ird\n", " {\r\n\t\"a\" : [1, 2]\n} ", nil, `"traceparent":"t"`,
			`{"jsonrpc":"2.0","id":"mcpbus-3","method":"tools/call","params":{"_meta":{"traceparent":"t"},"name":"we\"ird\n","arguments":{"a":[1,2]}}}`},
	}
	for _, c := range cases {
		b, err := appendToolCall(nil, 3, c.name, json.RawMessage(c.args), c.reqMeta, []byte(c.meta))
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != c.want+"\n" {
			t.Errorf("got  %s\nwant %s", b, c.want)
		}
		if bytes.Count(b, []byte("\n")) != 1 || !json.Valid(b) {
			t.Errorf("not one JSON line: %q", b)
		}
	}
	if _, err := appendToolCall(nil, 1, "x", json.RawMessage("{\n\"a\""), nil, nil); err == nil {
		t.Fatal("broken arguments accepted")
	}
}
