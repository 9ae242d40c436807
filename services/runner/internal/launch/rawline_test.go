package launch

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"testing/iotest"
)

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
