package mcpserver

import (
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// A tool whose input schema's $ref loops on itself would send the
// validator into recursion until the stack overflows, a fatal error that
// ends the gateway for every client. Its arguments are the server's to
// check; a sound schema is still checked here.
func TestLoopingInputSchemaLeftToTheServer(t *testing.T) {
	for schema, wantChecked := range map[string]bool{
		`{"type":"object","$ref":"#"}`: false,
		`{"type":"object","properties":{"x":{"$ref":"#/$defs/s"}},"$defs":{"s":{"type":"string"}}}`: true,
	} {
		tool, err := buildTool("s__t", model.Tool{Server: "s", Tool: "t", InputSchema: json.RawMessage(schema)})
		if err != nil {
			t.Fatal(err)
		}
		e := &toolEntry{name: "s__t", tool: tool}
		_, bad, mismatch := checkArguments(e, json.RawMessage(`{"x":1}`))
		if bad != nil || (mismatch != nil) != wantChecked {
			t.Fatalf("%s: bad %v, mismatch %v", schema, bad, mismatch)
		}
	}
}

// An elicitation relayed from a runner whose requested schema loops is
// refused before go-sdk would check the client's answer against it.
func TestLoopingElicitationSchemaRefused(t *testing.T) {
	caps := &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{}}
	req := model.ClientRequest{Method: model.MethodElicit, Params: json.RawMessage(`{"message":"m","requestedSchema":{"type":"object","$ref":"#"}}`)}
	if _, err := inputRequest(caps, req); apierr.Of(err) != apierr.Validation {
		t.Fatalf("looping schema: %v", err)
	}
	req.Params = json.RawMessage(`{"message":"m","requestedSchema":{"type":"object","properties":{"n":{"type":"string"}}}}`)
	if _, err := inputRequest(caps, req); err != nil {
		t.Fatalf("plain form: %v", err)
	}
}
