package runner

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func countTool(t testing.TB) *mcp.Tool {
	var tool mcp.Tool
	if err := json.Unmarshal([]byte(`{"name":"count","inputSchema":{"type":"object"},
		"outputSchema":{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}}`), &tool); err != nil {
		t.Fatal(err)
	}
	return &tool
}

// A result naming structuredContent twice is checked on each: a client's
// decoder keeps one of them, and which one is its own choice.
func TestConformChecksEveryStructuredContent(t *testing.T) {
	var c schemaCache
	tool := countTool(t)
	for _, data := range []string{
		`{"content":[],"structuredContent":{"n":1},"structuredContent":{"n":"one"}}`,
		`{"content":[],"structuredContent":{"n":"one"},"structuredContent":{"n":1}}`,
		// A JSON decoder reads the escape as structuredContent too.
		`{"content":[],"structuredCont\u0065nt":{"n":"one"}}`,
		`{"content":[],"structuredContent":{"n":1},"structuredCont\u0065nt":{"n":"one"}}`,
	} {
		if got := c.conform(tool, callReply{data: []byte(data)}); !got.isError || !strings.Contains(string(got.data), "does not match its output schema") {
			t.Errorf("%s passed as %s", data, got.data)
		}
	}
	// The validator quotes the offending value whole: the message is clipped.
	big := `{"content":[],"structuredContent":{"n":"` + strings.Repeat("z", 100000) + `"}}`
	if got := c.conform(tool, callReply{data: []byte(big)}); !got.isError || len(got.data) > 1000 {
		t.Errorf("a large mismatch became %d bytes", len(got.data))
	}
	// An error result loses every spelling of the member.
	badErr := callReply{data: []byte(`{"content":[],"isError":true,"structuredCont\u0065nt":{"n":"one"}}`), isError: true}
	if got := c.conform(tool, badErr); string(got.data) != `{"content":[],"isError":true}` {
		t.Errorf("an error result kept a bad structuredContent: %s", got.data)
	}
	ok := callReply{data: []byte(`{"content":[],"structuredContent":{"n":1}}`)}
	if got := c.conform(tool, ok); got.isError || string(got.data) != string(ok.data) {
		t.Errorf("a conforming result became %s", got.data)
	}
	// An output schema mcpbus does not validate (schemaguard) leaves the
	// result as the server gave it.
	loop := &mcp.Tool{Name: "loop", OutputSchema: json.RawMessage(`{"type":"object","$ref":"#"}`)}
	bad := callReply{data: []byte(`{"content":[],"structuredContent":{"n":"one"}}`)}
	if got := c.conform(loop, bad); got.isError {
		t.Errorf("a result of an unchecked schema was refused: %s", got.data)
	}
}

// The cost of the check per call, for a result of a typical size (a list
// of 20 records) against its schema; BenchmarkConformNoSchema is what every
// tool without an output schema pays.
func BenchmarkConform(b *testing.B) {
	var tool mcp.Tool
	if err := json.Unmarshal([]byte(`{"name":"list","inputSchema":{"type":"object"},"outputSchema":{"type":"object","required":["items"],
		"properties":{"items":{"type":"array","items":{"type":"object","required":["id","name"],
		"properties":{"id":{"type":"integer"},"name":{"type":"string"},"tags":{"type":"array","items":{"type":"string"}}}}}}}}`), &tool); err != nil {
		b.Fatal(err)
	}
	var items []string
	for i := range 20 {
		items = append(items, fmt.Sprintf(`{"id":%d,"name":"item %d","tags":["a","b","c"]}`, i, i))
	}
	structured := `{"items":[` + strings.Join(items, ",") + `]}`
	res := callReply{data: []byte(`{"content":[{"type":"text","text":` + strconvQuote(structured) + `}],"structuredContent":` + structured + `}`)}
	var c schemaCache
	if got := c.conform(&tool, res); got.isError {
		b.Fatalf("refused: %s", got.data)
	}
	b.SetBytes(int64(len(res.data)))
	b.ReportAllocs()
	for b.Loop() {
		c.conform(&tool, res)
	}
}

func BenchmarkConformNoSchema(b *testing.B) {
	tool := &mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)}
	res := callReply{data: []byte(`{"content":[{"type":"text","text":"hi"}]}`)}
	var c schemaCache
	b.ReportAllocs()
	for b.Loop() {
		c.conform(tool, res)
	}
}

func strconvQuote(s string) string { b, _ := json.Marshal(s); return string(b) }

// A key is the name a client's decoder reads: one spelled with an escape
// (every decoder unescapes it) or in other letter case (Go's encoding/json
// matches it) is structuredContent too. A server gave a conforming
// structuredContent and after it a "structured\u0043ontent" that breaks the
// schema, which JSON.parse keeps (the last of duplicates): the TypeScript
// SDK threw on a result mcpbus passed as checked.
func TestConformReadsKeysAsDecodersDo(t *testing.T) {
	var c schemaCache
	tool := countTool(t)
	for _, data := range []string{
		`{"content":[],"structuredContent":{"n":1},"structured\u0043ontent":{"n":"one"}}`,
		`{"content":[],"structuredContent":{"n":1},"StructuredContent":{"n":"one"}}`,
	} {
		if got := c.conform(tool, callReply{data: []byte(data)}); !got.isError || !strings.Contains(string(got.data), "does not match its output schema") {
			t.Errorf("%s passed as %s", data, got.data)
		}
	}
	// Only the exact key is what the TypeScript SDK reads as present.
	if got := c.conform(tool, callReply{data: []byte(`{"content":[],"StructuredContent":{"n":1}}`)}); !got.isError {
		t.Errorf("a result without structuredContent (only StructuredContent) passed as %s", got.data)
	}
	if got := c.conform(tool, callReply{data: []byte(`{"content":[],"structured\u0043ontent":{"n":1}}`)}); got.isError {
		t.Errorf("an escaped but conforming structuredContent was refused: %s", got.data)
	}
	// An error's mismatching structuredContent goes whatever its spelling,
	// and the other keys are kept as they were spelled.
	bad := `{"content":[{"type":"text","text":"no"}],"isError":true,"a\"b":1,"structured\u0043ontent":{"n":"one"},"StructuredContent":{"n":"two"}}`
	got := c.conform(tool, callReply{data: []byte(bad), isError: true})
	var m map[string]json.RawMessage
	if err := json.Unmarshal(got.data, &m); err != nil {
		t.Fatalf("%s: %v", got.data, err)
	}
	for k := range m {
		if strings.EqualFold(k, "structuredContent") {
			t.Errorf("an error result kept its mismatching %s: %s", k, got.data)
		}
	}
	if _, ok := m[`a"b`]; !ok {
		t.Errorf("an error result lost or renamed its key a\"b: %s", got.data)
	}
}
