package mcpserver

import (
	"bufio"
	"bytes"
	"io"
	"strings"
	"testing"
)

// lineFilter passes on the JSON-RPC messages, each trimmed to one line,
// and answers the rest: a line over its bound is skipped to its end.
func TestLineFilter(t *testing.T) {
	long := `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"` + strings.Repeat("x", 100) + `"}}`
	in := strings.Join([]string{
		`  {"jsonrpc":"2.0","id":2,"method":"ping"}  `,
		long,
		``,
		`{nope`,
		"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\"}\r",
		`{"jsonrpc":"2.0","id":4,"method":"ping"}`, // no newline at the end
	}, "\n")
	var out bytes.Buffer
	f := &lineFilter{rc: io.NopCloser(nil), br: bufio.NewReaderSize(strings.NewReader(in), 16), out: &out, max: 64}
	passed, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"jsonrpc":"2.0","id":2,"method":"ping"}` + "\n" + `{"jsonrpc":"2.0","id":3,"method":"ping"}` + "\n" + `{"jsonrpc":"2.0","id":4,"method":"ping"}` + "\n"
	if string(passed) != want {
		t.Errorf("passed on:\n%s\nwant:\n%s", passed, want)
	}
	answers := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(answers) != 2 || !strings.Contains(answers[0], `"code":-32600`) || !strings.Contains(answers[0], "longer than 64 bytes") ||
		!strings.Contains(answers[1], `"code":-32700`) {
		t.Errorf("answers:\n%s", out.String())
	}
}
