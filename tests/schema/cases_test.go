package schema

import (
	"strings"
	"testing"
)

// TestSchemaCases checks hand-written documents that each schema must accept
// or reject, so that no schema is vacuous and the rules of the Go code
// (enums, slug pattern, durations, required members) are really expressed.
func TestSchemaCases(t *testing.T) {
	r := loadRegistry(t)
	const record = `{"id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","name":"X","slug":"x","enabled":true,` +
		`"source":{"type":"manual"},"package":{"type":"npm","identifier":"pkg"},"transport":{"type":"stdio"}`
	const now = `"2026-01-02T03:04:05.123456789Z"`
	cases := []struct {
		schema string
		ok     bool
		doc    string
	}{
		{"error", true, `{"code":"NOT_FOUND","message":"server x not found","field":"server"}`},
		{"error", false, `{"code":"TEAPOT","message":"x"}`},
		{"error", false, `{"code":"NOT_FOUND"}`},
		{"error", false, `{"code":"NOT_FOUND","message":""}`},
		{"error", false, `{"code":"NOT_FOUND","message":"x","detail":"y"}`},

		{"mcp-config", true, record + `}`},
		{"mcp-config", true, record + `,"auth_type":"api_key","env_vars":{"API_KEY":{"secret_ref":"x/api_key","is_secret":true,"required":true}},` +
			`"config":{"a":[1,2]},"runtime":{"call_timeout":"1m30s","start_timeout":250},"created_at":` + now + `,"revision":3}`},
		{"mcp-config", false, `{"name":"X","transport":{"type":"stdio"},"package":{"type":"npm","identifier":"pkg"}}`}, // a draft, not a record
		{"mcp-config", false, strings.Replace(record, `"slug":"x"`, `"slug":"Bad Slug"`, 1) + `}`},
		{"mcp-config", false, strings.Replace(record, `"id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e"`, `"id":"42"`, 1) + `}`},
		{"mcp-config", false, strings.Replace(record, `"manual"`, `"github"`, 1) + `}`},
		{"mcp-config", false, strings.Replace(record, `"stdio"`, `"sse"`, 1) + `}`},
		{"mcp-config", false, strings.Replace(record, `"identifier":"pkg"`, `"identifier":"-rf"`, 1) + `}`},
		{"mcp-config", false, strings.Replace(record, `"type":"npm"`, `"type":"http"`, 1) + `}`}, // stdio needs npm, docker or binary
		{"mcp-config", false, record + `,"auth_type":"basic"}`},
		{"mcp-config", false, record + `,"runtime":{"call_timeout":"30 seconds"}}`},
		{"mcp-config", false, record + `,"runtime":{"call_timeout":"-5s"}}`},
		{"mcp-config", false, record + `,"env_vars":{"A=B":{"value":"x"}}}`},
		{"mcp-config", false, record + `,"env_vars":{"TOKEN":{"required":true}}}`},
		{"mcp-config", false, record + `,"created_at":"yesterday"}`},
		{"mcp-config", false, record + `,"secrets":{}}`},
		{"mcp-config", true, record + `,"tools":{"allow":["read_*","list_*"],"deny":["*delete*"]}}`},
		{"mcp-config", false, record + `,"tools":{"only":["x"]}}`},
		{"mcp-config", false, record + `,"tools":{"allow":[""]}}`},
		{"mcp-config#draft", true, `{"name":"Remote","transport":{"type":"http","url":"https://example.com/mcp"}}`},
		{"mcp-config#draft", false, `{"name":"Remote","transport":{"type":"http"}}`},
		{"mcp-config#draft", false, `{"name":"Remote","transport":{"type":"http","url":"ftp://example.com/mcp"}}`},
		{"mcp-config#draft", false, `{"name":"Local","transport":{"type":"stdio"}}`},
		{"mcp-config#draft", false, `{"name":"  ","transport":{"type":"http","url":"https://example.com/mcp"}}`},

		{"servers-file", true, `{"servers":[{"name":"Files","enabled":true,"package":{"type":"npm","identifier":"@modelcontextprotocol/server-filesystem","args":["/tmp"]},"transport":{"type":"stdio"}}]}`},
		{"servers-file", true, `{"servers":[]}`},
		{"servers-file", false, `{"servers":[{"name":"Files"}]}`},
		{"servers-file", false, `{"servers":[],"version":1}`},
		{"servers-file", false, `{"mcpServers":{}}`},

		{"status", true, `{"server":"x","state":"running","tools":["echo"],"runner":"r1","pid":42,"started_at":` + now + `,"updated_at":` + now + `,"calls":3}`},
		{"status", true, `{"server":"x","state":"error","code":"NOT_FOUND","message":"Package not found","updated_at":` + now + `}`},
		{"status", false, `{"server":"x","state":"error","updated_at":` + now + `}`},
		{"status", false, `{"server":"x","state":"running","updated_at":` + now + `}`},
		{"status", false, `{"server":"x","state":"paused","updated_at":` + now + `}`},
		{"status", false, `{"server":"x","state":"stopped"}`},
		{"status", false, `{"server":"x","state":"stopped","updated_at":` + now + `,"pid":0}`},

		{"tool", true, `{"name":"x__echo","server":"x","tool":"echo","subject":"mcp.v1.call.x.echo","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true,"x-new":1}}`},
		{"tool", false, `{"name":"x__echo me","server":"x","tool":"echo me","subject":"mcp.v1.call.x.echo_me_1234abcd"}`},
		{"tool", false, `{"name":"x__echo","server":"x","tool":"echo","subject":"mcp.v1.call.x"}`},
		{"tool", false, `{"name":"x__echo","server":"x","tool":"echo","subject":"mcp.v1.call.x.echo","inputSchema":{"type":"string"}}`},
		{"catalog", false, `{"server":"x","tools":[{"name":"x__echo","server":"x","tool":"echo"}],"updated_at":` + now + `}`},
		{"catalog", false, `{"server":"x","tools":[]}`},
		{"tools-list-reply", true, `{"tools":[]}`},
		{"tools-list-reply", false, `{}`},
		{"tools-list-request", true, `{}`},
		{"tools-list-request", false, `{"server":"UPPER"}`},
		{"tools-list-request", false, `{"servers":"x"}`},

		{"call-arguments", true, `{}`},
		{"call-arguments", false, `[]`},
		{"call-arguments", false, `"x"`},
		{"call-arguments", false, `null`},

		{"call-result", true, `{"content":[]}`},
		{"call-result", true, `{"content":[{"type":"text","text":"hi","annotations":{"audience":["user"],"priority":0.5},"future":1},` +
			`{"type":"image","data":"AAEC","mimeType":"image/png"},{"type":"audio","data":"AAEC","mimeType":"audio/wav"},` +
			`{"type":"resource_link","uri":"file:///tmp/a.txt","name":"a.txt","size":3},` +
			`{"type":"resource","resource":{"uri":"test://greeting","mimeType":"text/plain","text":"hello"}}],` +
			`"structuredContent":{"a":1},"isError":false,"_meta":{"k":"v"},"resultType":"complete"}`},
		{"call-result", false, `{}`},
		{"call-result", false, `{"content":null}`},
		{"call-result", false, `{"content":[{"type":"text"}]}`},
		{"call-result", false, `{"content":[{"text":"no type"}]}`},
		{"call-result", false, `{"content":[{"type":"video","url":"x"}]}`},
		{"call-result", false, `{"content":[{"type":"image","data":"AAEC"}]}`},
		{"call-result", false, `{"content":[{"type":"resource_link","uri":"file:///a"}]}`},
		{"call-result", false, `{"content":[{"type":"resource","resource":{"text":"no uri"}}]}`},
		{"call-result", false, `{"content":[],"isError":"yes"}`},

		{"rpc-request", true, `{"method":"resources/read","params":{"uri":"test://greeting"}}`},
		{"rpc-request", true, `{"method":"ping"}`},
		{"rpc-request", false, `{"method":"tools/call","params":{}}`},
		{"rpc-request", false, `{"params":{}}`},
		{"rpc-request", false, `{"method":"ping","params":[1]}`},
		{"runtime-request", true, `{}`},
		{"runtime-request", true, `{"server":""}`},
		{"runtime-request", false, `{"server":"Nope!"}`},
		{"runtime-status-reply", true, `{"servers":[]}`},
		{"runtime-status-reply", false, `{"servers":[{"server":"x"}]}`},
		{"cancel-request", true, `{"request_id":"abc"}`},
		{"cancel-request", false, `{}`},
		{"cancel-request", false, `{"request_id":""}`},
		{"control-request", true, `{"verb":"restart"}`},
		{"control-request", false, `{"verb":"explode"}`},
		{"control-request", false, `{}`},

		{"progress-event", true, `{"request_id":"abc","progress":1,"total":2,"message":"step 1"}`},
		{"progress-event", false, `{"progress":"1"}`},
		{"progress-event", false, `{"request_id":"abc"}`},
		{"call-event", true, `{"server":"x","tool":"echo","request_id":"r","trace_id":"0123456789abcdef0123456789abcdef","outcome":"ok","duration_ms":1.5,"at":` + now + `,"runner":"r1"}`},
		{"call-event", true, `{"server":"x","tool":"nope","outcome":"error","code":"NOT_FOUND","duration_ms":0.1,"at":` + now + `}`},
		{"call-event", false, `{"server":"x","tool":"echo","outcome":"meh","duration_ms":1,"at":` + now + `}`},
		{"call-event", false, `{"server":"x","tool":"echo","outcome":"error","duration_ms":1,"at":` + now + `}`},
		{"call-event", false, `{"server":"x","tool":"echo","outcome":"ok","code":"NOT_FOUND","duration_ms":1,"at":` + now + `}`},
		{"call-event", false, `{"server":"x","tool":"echo","outcome":"ok","trace_id":"xyz","duration_ms":1,"at":` + now + `}`},
	}
	covered := map[string]bool{}
	for _, c := range cases {
		covered[strings.TrimSuffix(c.schema, "#draft")] = true
		err := r.validate(c.schema, []byte(c.doc))
		switch {
		case c.ok && err != nil:
			t.Errorf("%s should accept %s: %v", c.schema, c.doc, err)
		case !c.ok && err == nil:
			t.Errorf("%s should reject %s", c.schema, c.doc)
		}
	}
	for _, name := range r.files {
		if !covered[name] {
			t.Errorf("no cases for schemas/%s.json", name)
		}
	}

	// Header schemas of the AsyncAPI document.
	headerCases := []struct {
		schema string
		ok     bool
		h      map[string][]string
	}{
		{"RequestHeaders", true, map[string][]string{"Mcp-Request-Id": {"r"}, "Mcp-Timeout-Ms": {"2500"},
			"traceparent": {"00-0123456789abcdef0123456789abcdef-0123456789abcdef-01"}}},
		{"RequestHeaders", false, map[string][]string{"Mcp-Timeout-Ms": {"soon"}}},
		{"RequestHeaders", false, map[string][]string{"traceparent": {"nope"}}},
		{"CallHeaders", true, map[string][]string{"Mcp-Request-Id": {"r"}, "Mcp-Progress-Subject": {"_INBOX.abc.def"}}},
		{"CallHeaders", false, map[string][]string{"Mcp-Progress-Subject": {"_INBOX.>"}}},
		{"CallHeaders", false, map[string][]string{"Mcp-Timeout-Ms": {"-1"}}},
		{"ErrorHeaders", true, map[string][]string{"Nats-Service-Error-Code": {"404"}, "Nats-Service-Error": {"not found"}}},
		{"ErrorHeaders", false, map[string][]string{"Nats-Service-Error-Code": {"418"}, "Nats-Service-Error": {"teapot"}}},
		{"ErrorHeaders", false, map[string][]string{"Nats-Service-Error": {"no code"}}},
	}
	for _, c := range headerCases {
		obj := map[string]any{}
		for k, v := range c.h {
			obj[k] = v[0]
		}
		err := r.asyncSchemas[c.schema].Validate(obj)
		switch {
		case c.ok && err != nil:
			t.Errorf("%s should accept %v: %v", c.schema, c.h, err)
		case !c.ok && err == nil:
			t.Errorf("%s should reject %v", c.schema, c.h)
		}
	}
}
