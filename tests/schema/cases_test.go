package schema

import (
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/mcpbus/mcpbus/libs/model"
)

// TestSchemaCases checks hand-written documents that each schema must accept
// or reject, so that no schema is vacuous and the rules of the Go code
// (enums, slug pattern, durations, required members) are really expressed.
func TestSchemaCases(t *testing.T) {
	r := loadRegistry(t)
	const record = `{"id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","name":"X","slug":"x","enabled":true,` +
		`"source":{"type":"manual"},"package":{"type":"npm","identifier":"pkg"},"transport":{"type":"stdio"}`
	const now = `"2026-01-02T03:04:05.123456789Z"`
	hash64 := strings.Repeat("ab", 32)
	// draft is a config.create body's config as libs/client sends it.
	const draft = `{"id":"","name":"X","slug":"","enabled":false,"source":{"type":""},"package":{"type":"binary","identifier":"/usr/bin/x"},"transport":{"type":"stdio"}}`
	// plan is the start of an install plan (without auth_type, ready, draft).
	const plan = `{"source":"official","name":"io.github.domdomegg/airtable-mcp-server","version":"1.7.3",` +
		`"package":{"type":"npm","registry_type":"npm","identifier":"airtable-mcp-server@1.7.3","version":"1.7.3","runtime_hint":"npx"},` +
		`"options":[{"kind":"package","type":"npm","identifier":"airtable-mcp-server","usable":true,"chosen":true},` +
		`{"kind":"package","type":"mcpb","identifier":"x.mcpb","usable":false,"reason":"MCP bundles (.mcpb) are not supported"}],` +
		`"credentials":[{"kind":"env","name":"AIRTABLE_API_KEY","required":true}],"inputs":[{"name":"LOG_LEVEL","kind":"env","required":false,"default":"info","value":"info"}]`
	const planDraft = `{"id":"","name":"airtable","slug":"airtable","enabled":true,"source":{"type":"official","name":"io.github.domdomegg/airtable-mcp-server"},` +
		`"package":{"type":"npm","identifier":"airtable-mcp-server@1.7.3","runtime_hint":"npx"},"transport":{"type":"stdio"},"auth_type":"api_key",` +
		`"env_vars":{"AIRTABLE_API_KEY":{"secret_ref":"AIRTABLE_API_KEY","is_secret":true,"required":true}}}`
	curveKey := newCurveKey(t)
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
		{"mcp-config", true, record + `,"secret_scan":{"arguments":"redact","results":"off"}}`},
		{"mcp-config", true, record + `,"secret_scan":{"results":"block"}}`},
		{"mcp-config", false, record + `,"secret_scan":{"arguments":"warn"}}`},
		{"mcp-config", false, record + `,"secret_scan":{"args":"block"}}`},
		{"mcp-config", false, record + `,"runtime":{"call_timeout":"30 seconds"}}`},
		{"mcp-config", false, record + `,"runtime":{"call_timeout":"-5s"}}`},
		{"mcp-config", false, record + `,"env_vars":{"A=B":{"value":"x"}}}`},
		{"mcp-config", false, record + `,"env_vars":{"TOKEN":{"required":true}}}`},
		{"mcp-config", false, record + `,"created_at":"yesterday"}`},
		{"mcp-config", false, record + `,"secrets":{}}`},
		{"mcp-config", true, record + `,"tools":{"allow":["read_*","list_*"],"deny":["*delete*"]}}`},
		{"mcp-config", false, record + `,"tools":{"only":["x"]}}`},
		{"mcp-config", false, record + `,"tools":{"allow":[""]}}`},
		{"mcp-config", true, record + `,"env_vars":{"TOKEN":{"secret_ref":"TOKEN","is_secret":true,"required":true}}}`},
		{"mcp-config", false, record + `,"env_vars":{"TOKEN":{"is_secret":true,"required":true}}}`}, // a record names where the secret is
		{"mcp-config", false, strings.Replace(record, `"slug":"x"`, `"slug":""`, 1) + `}`},
		{"mcp-config", false, strings.Replace(record, `"id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e"`, `"id":""`, 1) + `}`},
		{"mcp-config", false, strings.Replace(record, `"id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e"`, `"id":"0B6F2A4E-3C1D-4F7A-9A53-2F9F4B8C1D2E"`, 1) + `}`},
		{"mcp-config", false, strings.Replace(record, `"manual"`, `""`, 1) + `}`},
		{"mcp-config", true, strings.Replace(record, `"identifier":"pkg"`, `"identifier":"pkg","runtime_args":["--yes"]`, 1) + `}`},
		{"mcp-config", false, strings.Replace(record, `"type":"npm","identifier":"pkg"`, `"type":"binary","identifier":"pkg","runtime_args":["--yes"]`, 1) + `}`},
		{"mcp-config", false, strings.Replace(record, `"identifier":"pkg"`, `"identifier":"pkg","runtime_args":["a\nb"]`, 1) + `}`},
		// What a Go client sends for a draft: empty strings for what it leaves to the config service.
		{"mcp-config#draft", true, `{"id":"","name":"Remote","slug":"","enabled":false,"source":{"type":""},"package":{"type":"","identifier":""},"transport":{"type":"http","url":"https://example.com/mcp"}}`},
		{"mcp-config#draft", true, `{"name":"Local","package":{"type":"npm","identifier":"pkg"},"transport":{"type":"stdio"},"env_vars":{"API_KEY":{"is_secret":true,"required":true}}}`},
		{"mcp-config#draft", false, `{"id":"","name":"Local","slug":"","source":{"type":""},"package":{"type":"npm","identifier":""},"transport":{"type":"stdio"}}`},
		{"mcp-config#draft", false, `{"id":"nope","name":"Remote","transport":{"type":"http","url":"https://example.com/mcp"}}`},
		{"mcp-config#draft", false, `{"name":"Local","package":{"type":"npm","identifier":"pkg"},"transport":{"type":"stdio"},"env_vars":{"API_KEY":{"is_secret":false,"required":true}}}`},
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
		{"status", true, `{"server":"x","state":"error","code":"SERVICE_UNAVAILABLE","message":"crashed","retry_at":` + now + `,"updated_at":` + now + `}`},
		{"status", false, `{"server":"x","state":"starting","retry_at":` + now + `,"updated_at":` + now + `}`},
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
		{"tools-search-request", true, `{"query":"read a file","limit":5}`},
		{"tools-search-request", false, `{}`},
		{"tools-search-request", false, `{"query":""}`},
		{"tools-search-request", false, `{"query":"x","limit":101}`},
		{"tools-search-reply", true, `{"tools":[],"scores":[]}`},
		{"tools-search-reply", false, `{"tools":[]}`},
		{"tools-search-reply", false, `{"tools":[{"name":"a__b","server":"a","tool":"b","subject":"mcp.v1.call.a.b","score":1}],"scores":[1]}`},
		{"task", true, `{"id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","state":"completed","server":"slow","tool":"sleep","name":"slow__sleep","principal":"key:k1","attempts":1,"runner":"r1","created_at":"2026-01-02T03:04:05Z","updated_at":"2026-01-02T03:04:08Z","ttl_ms":86400000,"result":{"content":[{"type":"text","text":"slept"}]}}`},
		{"task", true, `{"id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","state":"failed","message":"m","server":"s","tool":"t","name":"s__t","principal":"operator","attempts":1,"created_at":"2026-01-02T03:04:05Z","updated_at":"2026-01-02T03:04:05Z","ttl_ms":1,"error":{"code":"SERVICE_UNAVAILABLE","message":"m"}}`},
		{"task", false, `{"id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","state":"done","server":"s","tool":"t","name":"s__t","principal":"operator","attempts":1,"created_at":"2026-01-02T03:04:05Z","updated_at":"2026-01-02T03:04:05Z","ttl_ms":1}`},
		{"task", false, `{"id":"x","state":"working"}`},
		{"task", true, `{"id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","state":"working","server":"s","tool":"t","name":"s__t","principal":"operator","attempts":1,"created_at":"2026-01-02T03:04:05Z","updated_at":"2026-01-02T03:04:06Z","ttl_ms":1,"progress":{"progress":3,"total":10,"message":"step 3"}}`},
		{"task", false, `{"id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","state":"working","server":"s","tool":"t","name":"s__t","principal":"operator","attempts":1,"created_at":"2026-01-02T03:04:05Z","updated_at":"2026-01-02T03:04:06Z","ttl_ms":1,"progress":{"total":10}}`},
		{"task-create-request", true, `{"server":"slow","tool":"sleep","arguments":{"ms":30000}}`},
		{"task-create-request", true, `{"name":"slow__sleep"}`},
		{"task-create-request", false, `{"server":"slow"}`},
		{"task-create-request", false, `{"name":"slow__sleep","server":"slow"}`},
		{"task-create-request", false, `{"server":"slow","tool":"sleep","arguments":[]}`},
		{"task-request", true, `{"id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","wait_ms":5000}`},
		{"task-request", false, `{}`},
		{"task-request", false, `{"id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","wait_ms":-1}`},
		{"task-list-request", true, `{}`},
		{"task-list-request", true, `{"state":"working","all":true}`},
		{"task-list-request", false, `{"state":"running"}`},
		{"task-list-reply", true, `{"tasks":[]}`},
		{"task-list-reply", false, `{}`},
		{"task-run", true, `{"id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e"}`},
		{"task-run", false, `{"id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","args":{}}`},

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
		{"control-request", true, `{"verb":"pins"}`},
		{"control-request", true, `{"verb":"forget","principal":"key:k1"}`},
		{"control-request", false, `{"verb":"explode"}`},
		{"control-request", false, `{}`},

		{"progress-event", true, `{"request_id":"abc","progress":1,"total":2,"message":"step 1"}`},
		{"client-request", true, `{"request_id":"abc","server":"alpha","method":"elicitation/create","params":{"message":"Name?","requestedSchema":{"type":"object"}}}`},
		{"client-request", false, `{"server":"alpha","method":"roots/list"}`},
		{"client-request", false, `{"method":"elicitation/create"}`},
		{"progress-event", false, `{"progress":"1"}`},
		{"progress-event", false, `{"request_id":"abc"}`},
		{"call-event", true, `{"server":"x","tool":"echo","request_id":"r","trace_id":"0123456789abcdef0123456789abcdef","outcome":"ok","duration_ms":1.5,"at":` + now + `,"runner":"r1"}`},
		{"call-event", true, `{"server":"x","tool":"nope","outcome":"error","code":"NOT_FOUND","duration_ms":0.1,"at":` + now + `}`},
		{"call-event", true, `{"server":"x","tool":"echo","outcome":"tool_error","duration_ms":1,"at":` + now + `,"secrets":[{"where":"arguments","rule":"aws-access-token","action":"block"}]}`},
		{"call-event", false, `{"server":"x","tool":"echo","outcome":"ok","duration_ms":1,"at":` + now + `,"secrets":[{"where":"result","rule":"github-pat","action":"redact","value":"ghp_x"}]}`}, // never a value
		{"call-event", false, `{"server":"x","tool":"echo","outcome":"ok","duration_ms":1,"at":` + now + `,"secrets":[{"where":"headers","rule":"r","action":"redact"}]}`},
		{"call-event", false, `{"server":"x","tool":"echo","outcome":"meh","duration_ms":1,"at":` + now + `}`},
		{"call-event", false, `{"server":"x","tool":"echo","outcome":"error","duration_ms":1,"at":` + now + `}`},
		{"call-event", false, `{"server":"x","tool":"echo","outcome":"ok","code":"NOT_FOUND","duration_ms":1,"at":` + now + `}`},
		{"call-event", false, `{"server":"x","tool":"echo","outcome":"ok","trace_id":"xyz","duration_ms":1,"at":` + now + `}`},

		// Config service.
		{"config-ref", true, `{"server":"x"}`},
		{"config-ref", true, `{"server":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e"}`},
		{"config-ref", false, `{"server":"  "}`},
		{"config-ref", false, `{}`},
		{"config-ref", false, `{"server":"x","revision":1}`},
		{"config-create-request", true, `{"config":` + draft + `}`},
		{"config-create-request", true, `{"config":` + draft + `,"sealed_secrets":"eGt2MQ==","sender_key":"` + curveKey + `","secret_names":{"env":["API_KEY"],"headers":["Authorization"]}}`},
		{"config-create-request", false, `{"config":` + draft + `,"secrets":{"env":{"API_KEY":"s3cret"},"headers":{"Authorization":"Bearer t"}}}`}, // secrets in clear
		{"config-create-request", false, `{"config":` + draft + `,"sealed_secrets":"eGt2MQ==","sender_key":"` + curveKey + `"}`},                   // no names
		{"config-create-request", false, `{"config":` + draft + `,"secret_names":{"env":["API_KEY"]}}`},                                            // names, nothing sealed
		{"config-create-request", false, `{"secrets":{}}`},
		{"config-create-request", false, `{"config":{"name":"X","transport":{"type":"stdio"},"package":{"type":"","identifier":""}}}`},
		{"config-create-request", false, `{"config":` + draft + `,"secrets":{"env":{"API_KEY":""}}}`},
		{"config-create-request", false, `{"config":` + draft + `,"secrets":{"passwords":{}}}`},
		{"config-update-request", true, `{"config":` + strings.Replace(draft, `"id":""`, `"id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e"`, 1) + `}`},
		{"config-update-request", true, `{"config":` + strings.Replace(draft, `"slug":""`, `"slug":"x","revision":4`, 1) + `}`},
		{"config-update-request", false, `{"config":` + draft + `}`}, // neither id nor slug
		{"config-update-request", false, `{"config":` + strings.Replace(draft, `"slug":""`, `"slug":"x","revision":-1`, 1) + `}`},
		{"config-list-request", true, `{}`},
		{"config-list-request", false, `{"server":"x"}`},
		{"config-list-reply", true, `{"configs":[` + record + `}]}`},
		{"config-list-reply", true, `{"configs":[]}`},
		{"config-list-reply", false, `{"configs":null}`},
		{"config-list-reply", false, `{"configs":[` + draft + `]}`},
		{"config-delete-reply", true, `{"id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","server":"x"}`},
		{"config-delete-reply", false, `{"id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e"}`},
		{"config-delete-reply", false, `{"id":"x","server":"x"}`},
		{"config-import-request", true, `{"content":"{\"mcpServers\":{}}","vars":{"TOKEN":"v"},"replace":true,"enabled":false}`},
		{"config-import-request", true, `{"format":"mcp.yaml","content":"servers: {}"}`},
		{"config-import-request", true, `{"entries":[{"config":` + draft + `,"sealed_secrets":"eGt2MQ==","sender_key":"` + curveKey + `","secret_names":{"env":["API_KEY"]}},{"config":` + draft + `}],"replace":true}`},
		{"config-import-request", false, `{"entries":[{"config":` + draft + `}],"content":"servers: {}"}`},
		{"config-import-request", false, `{"entries":[{"config":` + draft + `}],"vars":{"A":"s3cret"}}`},
		{"config-import-request", false, `{"entries":[]}`},
		{"config-import-request", false, `{}`},
		{"config-import-request", false, `{"format":"toml","content":"x"}`},
		{"config-import-request", false, `{"content":" \n"}`},
		{"config-import-request", false, `{"content":"x","vars":{"A":1}}`},
		{"config-import-reply", true, `{"created":[` + record + `}],"updated":[]}`},
		{"config-import-reply", false, `{"created":[]}`},
		{"config-export-request", true, `{"format":""}`},
		{"config-export-request", true, `{"format":"mcpServers","servers":["x","0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e"]}`},
		{"config-export-request", false, `{}`},
		{"config-export-request", false, `{"format":"xml"}`},
		{"config-export-request", false, `{"format":"servers","servers":[""]}`},
		{"config-export-reply", true, `{"format":"mcp.yaml","content":"servers: {}\n"}`},
		{"config-export-reply", false, `{"format":"","content":""}`},
		{"config-export-reply", false, `{"format":"servers"}`},
		{"config-history-reply", true, `{"revisions":[{"version":1,"revision":3,"operation":"put","at":` + now + `,"config":` + record + `,"revision":3,"version":1}},` +
			`{"version":2,"revision":5,"operation":"delete","at":` + now + `}]}`},
		{"config-history-reply", true, `{"revisions":[]}`},
		{"config-history-reply", false, `{"revisions":[{"version":1,"revision":5,"operation":"delete","at":` + now + `,"config":` + record + `}}]}`},
		{"config-history-reply", false, `{"revisions":[{"version":1,"revision":0,"operation":"put","at":` + now + `}]}`},
		{"config-history-reply", false, `{"revisions":[{"version":1,"revision":1,"operation":"update","at":` + now + `}]}`},
		{"config-history-reply", false, `{"revisions":[{"revision":3,"operation":"put","at":` + now + `}]}`},
		{"config-history-reply", false, `{"revisions":[{"version":0,"revision":3,"operation":"put","at":` + now + `}]}`},
		{"config-rollback-request", true, `{"server":"x","revision":3}`},
		{"config-rollback-request", false, `{"server":"x","revision":0}`},
		{"config-rollback-request", false, `{"server":"x"}`},
		{"config-rollback-request", true, `{"server":"x","version":2}`},
		{"config-rollback-request", false, `{"server":"x","version":2,"revision":3}`},
		{"config-rollback-request", false, `{"server":"x","version":0}`},
		{"config-rollback-request", false, `{"server":"","revision":3}`},
		{"config-event", true, `{"type":"created","server":"x","id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","revision":1,"enabled":false,"request_id":"r","at":` + now + `}`},
		{"config-event", true, `{"type":"deleted","server":"x","id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","enabled":false,"at":` + now + `}`},
		{"config-event", false, `{"type":"deleted","server":"x","id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","revision":2,"enabled":false,"at":` + now + `}`},
		{"config-event", false, `{"type":"updated","server":"x","id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","enabled":false,"at":` + now + `}`},
		{"config-event", false, `{"type":"enabled","server":"x","id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","revision":2,"enabled":false,"at":` + now + `}`},
		{"config-event", false, `{"type":"disabled","server":"x","id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","revision":2,"enabled":true,"at":` + now + `}`},
		{"config-event", false, `{"type":"renamed","server":"x","id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","revision":2,"enabled":true,"at":` + now + `}`},
		{"slug-reservation", true, `"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e"`},
		{"slug-reservation", false, `"x"`},
		{"slug-reservation", false, `{"id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e"}`},

		// Credential service: set carries values sealed (their plain text is
		// sealed-credentials), the description has no place for one.
		{"sealed-credentials", true, `{"env":{"API_KEY":"s3cret"},` +
			`"headers":{"X-Api-Key":"v\tw"},"keyfiles":{"GCP_KEY":"/etc/keys/gcp.json"},` +
			`"oauth":{"access_token":"a","refresh_token":"r","token_type":"Bearer","expires_at":` + now + `,"scopes":["repo"],"provider":"github",` +
			`"token_url":"https://github.com/login/oauth/access_token","client_id":"c","client_secret":"s","env_var":"GITHUB_TOKEN"}}`},
		{"cred-set-request", true, `{"server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","replace":true}`},
		{"cred-set-request", true, `{"server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","sealed":"eGt2MQ==","sender_key":"` + curveKey + `"}`},
		{"cred-set-request", true, `{"server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","sealed":"eGt2MQ==","sender_key":"` + curveKey + `","names":{"env":["A"],"oauth":{"header":"Authorization"}},"dry_run":true}`},
		{"cred-set-request", false, `{"server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","credentials":{"env":{"API_KEY":"s3cret"}}}`}, // secrets in clear
		{"cred-set-request", false, `{"server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","sealed":"eGt2MQ=="}`},
		{"cred-set-request", false, `{"server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","sealed":"not base64!","sender_key":"` + curveKey + `"}`},
		{"cred-set-request", false, `{"server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","sealed":"eGt2MQ==","sender_key":"` + curveKey + `","names":{"env":{"A":"s3cret"}}}`},
		{"cred-key-request", true, `{}`},
		{"cred-key-request", false, `{"key":"x"}`},
		{"cred-key-reply", true, `{"public_key":"` + curveKey + `"}`},
		{"cred-key-reply", false, `{"public_key":"` + strings.Replace(curveKey, "X", "U", 1) + `"}`},
		{"cred-key-reply", false, `{}`},
		{"cred-set-request", false, `{"server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e"}`}, // nothing sealed, no replace
		{"sealed-credentials", false, `{"env":{}}`},
		{"cred-set-request", false, `{"server_id":"0B6F2A4E-3C1D-4F7A-9A53-2F9F4B8C1D2E","sealed":"eGt2MQ==","sender_key":"` + curveKey + `"}`},
		{"sealed-credentials", false, `{"env":{"A=B":"c"}}`},
		{"sealed-credentials", false, `{"env":{"A":"b\u0000"}}`},
		{"sealed-credentials", false, `{"headers":{"Bad Header":"v"}}`},
		{"sealed-credentials", false, `{"headers":{"X-Key":"a\r\nInjected: 1"}}`},
		{"sealed-credentials", false, `{"keyfiles":{"K":"relative/key"}}`},
		{"sealed-credentials", false, `{"oauth":{"access_token":"a"}}`},
		{"sealed-credentials", false, `{"oauth":{"env_var":"T"}}`},
		{"sealed-credentials", false, `{"oauth":{"access_token":"a","env_var":"T","token_url":"https://u:p@auth.example/token"}}`},
		{"sealed-credentials", false, `{"oauth":{"access_token":"a","env_var":"T","token_url":"ftp://auth.example/token"}}`},
		{"cred-forget-request", true, `{"principal":"agent:twin"}`},
		{"cred-forget-request", false, `{"principal":""}`},
		{"cred-forget-request", false, `{}`},
		{"cred-forget-reply", true, `{"principal":"agent:twin","removed":2}`},
		{"cred-forget-reply", false, `{"principal":"agent:twin","removed":-1}`},
		{"cred-delete-request", true, `{"server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e"}`},
		{"cred-delete-request", true, `{"server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","names":["API_KEY","oauth"]}`},
		{"cred-delete-request", false, `{"server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","names":[""]}`},
		{"cred-delete-request", false, `{"names":["API_KEY"]}`},
		{"cred-describe-request", true, `{"server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e"}`},
		{"cred-describe-request", false, `{"server_id":"x"}`},
		{"cred-describe-request", false, `{"server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","values":true}`},
		{"cred-description", true, `{"server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","backend":"vault","env":["API_KEY"],"headers":["Authorization"],"keyfiles":[],` +
			`"oauth":{"provider":"github","expires_at":` + now + `,"has_refresh_token":true,"scopes":["repo"],"env_var":"GITHUB_TOKEN"},"updated_at":` + now + `}`},
		{"cred-description", true, `{"server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","backend":"file","env":[],"headers":[],"keyfiles":[]}`},
		{"cred-description", false, `{"server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","backend":"file","env":[],"headers":[],"keyfiles":[],"updated_at":` + now + `}`},
		{"cred-description", false, `{"server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","backend":"file","env":{"API_KEY":"s3cret"},"headers":[],"keyfiles":[]}`},
		{"cred-description", false, `{"server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","backend":"file","env":[],"headers":[],"keyfiles":[],"values":{"API_KEY":"s3cret"}}`},
		{"cred-description", false, `{"server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","backend":"file","env":[],"headers":[],"keyfiles":[],` +
			`"oauth":{"access_token":"a","has_refresh_token":false,"env_var":"T"},"updated_at":` + now + `}`},
		{"cred-description", false, `{"server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","backend":"file","env":null,"headers":[],"keyfiles":[]}`},
		{"cred-description", false, `{"server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","backend":"memory","env":[],"headers":[],"keyfiles":[]}`},
		{"cred-resolve-request", true, `{"server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","recipient_key":"` + curveKey + `"}`},
		{"cred-resolve-request", false, `{"server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","recipient_key":"` + strings.Replace(curveKey, "X", "U", 1) + `"}`},
		{"cred-resolve-request", false, `{"server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","recipient_key":"` + curveKey[:55] + `"}`},
		{"cred-resolve-request", false, `{"server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e"}`},
		{"cred-resolve-request", true, `{"server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","recipient_key":"` + curveKey + `","runner":"r1"}`},
		{"cred-resolve-request", false, `{"server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","recipient_key":"` + curveKey + `","runner":""}`},
		{"cred-event", true, `{"type":"resolved","server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","runner":"r1","via":"resolve","at":` + now + `}`},
		{"cred-event", true, `{"type":"refused","server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","via":"registry","code":"VALIDATION_ERROR","at":` + now + `}`},
		{"cred-event", false, `{"type":"refused","server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","via":"resolve","at":` + now + `}`},
		{"cred-event", false, `{"type":"resolved","server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","via":"resolve","code":"X","at":` + now + `}`},
		{"cred-event", false, `{"type":"resolved","server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","via":"resolve","value":"s3cret","at":` + now + `}`},
		{"cred-event", true, `{"type":"changed","server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","via":"set","at":` + now + `}`},
		{"cred-event", false, `{"type":"changed","server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","via":"put","at":` + now + `}`},
		{"cred-fingerprints-request", true, `{"recipient_key":"` + curveKey + `","runner":"r1"}`},
		{"cred-fingerprints-request", false, `{"runner":"r1"}`},
		{"cred-fingerprints-request", false, `{"recipient_key":"` + curveKey + `","server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e"}`},
		{"cred-fingerprints", true, `{"alg":"siphash-2-4-128","key":"` + strings.Repeat("A", 43) + `=","sums":"` + strings.Repeat("B", 20) + `AA==","lengths":[8,31],"records":2,"at":` + now + `}`},
		{"cred-fingerprints", true, `{"alg":"siphash-2-4-128","key":"` + strings.Repeat("A", 43) + `=","sums":null,"lengths":null,"records":0,"at":` + now + `}`},
		{"cred-fingerprints", false, `{"alg":"hmac-sha256-128","key":"` + strings.Repeat("A", 43) + `=","sums":null,"lengths":null,"records":0,"at":` + now + `}`},
		{"cred-fingerprints", false, `{"key":"` + strings.Repeat("A", 43) + `=","sums":null,"lengths":null,"records":0,"at":` + now + `}`},
		{"cred-fingerprints", false, `{"key":"` + strings.Repeat("A", 43) + `=","sums":"QUFB","lengths":[4],"records":1,"at":` + now + `}`},
		{"cred-fingerprints", false, `{"key":"` + strings.Repeat("A", 43) + `=","sums":"QUFB","lengths":[8],"records":1,"values":["s3cret-value"],"at":` + now + `}`},
		{"sealed-reply", true, `{"sender_key":"` + curveKey + `","sealed":"eGt2MT0sQGjEwJuerG8k6DFcwvJjACC+JTt/p9Zrc7N+Ljg="}`},
		{"sealed-reply", false, `{"sender_key":"` + curveKey + `","sealed":"not base64!"}`},
		{"sealed-reply", false, `{"sender_key":"` + curveKey + `","sealed":""}`},
		{"sealed-reply", false, `{"sender_key":"` + curveKey + `","sealed":"eGt2MQ==","env":{"API_KEY":"s3cret"}}`},
		{"cred-chatkey-request", true, `{"profile":"work","recipient_key":"` + curveKey + `"}`},
		{"cred-chatkey-request", false, `{"profile":"work"}`},
		{"cred-chatkey-request", false, `{"recipient_key":"` + curveKey + `"}`},
		{"cred-chatkey-request", false, `{"profile":"work.>","recipient_key":"` + curveKey + `"}`},
		{"cred-chatkey-request", false, `{"profile":"Work","recipient_key":"` + curveKey + `"}`},
		{"cred-chatkey-request", false, `{"profile":"work","server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","recipient_key":"` + curveKey + `"}`}, // no id of the caller's choosing
		{"cred-oauthclient-request", true, `{"server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","recipient_key":"` + curveKey + `"}`},
		{"cred-oauthclient-request", false, `{"server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e"}`},
		{"cred-oauthclient-request", false, `{"server_id":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","recipient_key":"` + curveKey + `","client_secret":"s"}`},
		{"cred-chatkey-reply", true, `{"sender_key":"` + curveKey + `","sealed":"eGt2MT0sQGjEwJuerG8k6DFcwvJjACC+JTt/p9Zrc7N+Ljg="}`},
		{"cred-chatkey-reply", false, `{"sender_key":"` + curveKey + `","sealed":"eGt2MQ==","api_key":"s3cret"}`},
		{"cred-chatkey-reply", false, `{"sealed":"eGt2MQ=="}`},
		{"gateway-retry-request", true, `{"owner":"0123456789abcdef","tool":"alpha__ask","requestState":"abcdefghijklmnop.AbC-_9","inputResponses":{"mcpbus-1":{"action":"accept","content":{"name":"Ada"}}}}`},
		{"gateway-retry-request", true, `{"owner":"0123456789abcdef","tool":"alpha__ask","requestState":"abcdefghijklmnop.AbC"}`},
		{"gateway-retry-request", false, `{"owner":"k-a","tool":"alpha__ask","requestState":"abcdefghijklmnop.AbC"}`},
		{"gateway-retry-request", false, `{"owner":"0123456789abcdef","tool":"alpha__ask","requestState":"a.b.>"}`},
		{"gateway-retry-reply", true, `{"result":{"content":[{"type":"text","text":"hello Ada"}]}}`},
		{"gateway-retry-reply", true, `{"error":{"code":-32602,"message":"requestState belongs to another caller","data":{"code":"VALIDATION_ERROR","message":"requestState belongs to another caller","field":"requestState"}}}`},
		{"gateway-retry-reply", false, `{}`},
		{"gateway-retry-reply", false, `{"result":{},"error":{"code":1,"message":"x"}}`},
		{"oauth-start-request", true, `{"server":"remote"}`},
		{"oauth-start-request", false, `{}`},
		{"oauth-start-request", false, `{"server":""}`},
		{"oauth-start-request", false, `{"server":"remote","client_secret":"s3cret"}`},
		{"oauth-start-reply", true, `{"server":"remote","authorization_url":"https://as.example/authorize?state=x","expires_at":` + now + `}`},
		{"oauth-start-reply", false, `{"server":"remote","authorization_url":"javascript:alert(1)","expires_at":` + now + `}`},
		{"oauth-start-reply", false, `{"server":"remote","authorization_url":"https://as.example/authorize","expires_at":` + now + `,"access_token":"t"}`},
		{"oauth-callback-request", true, `{"sealed":"eGt2MQ==","sender_key":"` + curveKey + `"}`},
		{"oauth-callback-request", false, `{"sealed":"eGt2MQ==","sender_key":"` + curveKey + `","code":"c"}`},
		{"oauth-callback-request", false, `{"sealed":"eGt2MQ=="}`},
		{"oauth-callback-reply", true, `{"server":"remote"}`},
		{"oauth-callback-reply", false, `{"server":"remote","access_token":"t"}`},
		{"oauth-event", true, `{"type":"authorized","server":"remote","at":` + now + `}`},
		{"resource-updated-event", true, `{"server":"fs","uri":"file:///tmp/a.txt","at":` + now + `}`},
		{"resource-updated-event", false, `{"server":"fs","uri":"","at":` + now + `}`},
		{"list-changed-event", true, `{"server":"fs","list":"prompts","at":` + now + `}`},
		{"list-changed-event", false, `{"server":"fs","list":"tools","at":` + now + `}`},
		{"tool-reviewed-event", true, `{"server":"fs","tool":"write","decision":"approved","principal":"key:k1","pinned_hash":"` + hash64 + `","new_hash":"` + hash64 + `","at":` + now + `}`},
		{"tool-reviewed-event", true, `{"server":"fs","tool":"find","decision":"rejected","principal":"operator","pinned_hash":"","new_hash":"` + hash64 + `","at":` + now + `}`},
		{"tool-reviewed-event", false, `{"server":"fs","tool":"write","decision":"maybe","principal":"key:k1","pinned_hash":"","new_hash":"` + hash64 + `","at":` + now + `}`},
		{"tool-reviewed-event", false, `{"server":"fs","tool":"write","decision":"approved","principal":"key:k1","pinned_hash":"","new_hash":"","at":` + now + `}`},
		{"gateway-audit-event", true, `{"action":"key_created","principal":"operator","key_id":"k1","key_name":"app","scopes":["call"],"at":` + now + `}`},
		{"gateway-audit-event", true, `{"action":"tokens_revoked","principal":"key:k1","revoke_kind":"jti","revoke_value":"t-1","at":` + now + `}`},
		{"gateway-audit-event", true, `{"action":"approval_decided","principal":"key:bob","held_id":"0123","server":"fs","tool":"fs__write","decision":"denied","at":` + now + `}`},
		{"gateway-audit-event", true, `{"action":"approval_decided","principal":"operator","held_id":"0123","server":"fs","tool":"fs__write","decision":"denied","reason":"the agent that made it was revoked","at":` + now + `}`},
		{"gateway-audit-event", true, `{"action":"approval_rules_changed","principal":"operator","rules":2,"default":"allow","at":` + now + `}`},
		{"gateway-audit-event", false, `{"action":"key_created","principal":"operator","at":` + now + `}`},
		{"gateway-audit-event", false, `{"action":"tokens_revoked","principal":"operator","revoke_kind":"jti","at":` + now + `}`},
		{"gateway-audit-event", false, `{"action":"key_created","principal":"operator","key_id":"k1","key":"mcpbus_secret","at":` + now + `}`},
		{"gateway-audit-event", false, `{"action":"logged_in","principal":"operator","at":` + now + `}`},
		{"tools-approve-request", true, `{"server":"fs","tool":"write","hash":"` + hash64 + `"}`},
		{"tools-approve-request", true, `{"server":"fs","tool":"write","hash":"` + hash64 + `","reject":true}`},
		{"tools-approve-request", false, `{"server":"fs","tool":"write"}`},
		{"tools-approve-request", false, `{"server":"fs","tool":"write","hash":"abc"}`},
		{"tool-pin", true, `{"server":"fs","tool":"write","hash":"` + hash64 + `","definition":{"name":"write"},"pinned_at":` + now + `}`},
		{"tool-pin", true, `{"server":"fs","tool":"find","hash":"","definition":null,"pinned_at":` + now + `,"pending":{"hash":"` + hash64 + `","definition":{"name":"find"},"seen_at":` + now + `}}`},
		{"tool-pin", false, `{"server":"fs","tool":"find","hash":"","definition":null,"pinned_at":` + now + `,"pending":{"hash":"x","definition":{},"seen_at":` + now + `}}`},
		{"tools-review-request", true, `{}`},
		{"tools-review-request", true, `{"server":"fs"}`},
		{"tools-review-request", false, `{"server":"Not A Slug"}`},
		{"tools-review-request", false, `{"server":"fs","tool":"write"}`},
		{"tools-review-reply", true, `{"changes":[]}`},
		{"tools-review-reply", true, `{"changes":[{"server":"fs","tool":"find","hash":"","definition":null,"pinned_at":` + now + `,"pending":{"hash":"` + hash64 + `","definition":{"name":"find"},"seen_at":` + now + `}}]}`},
		{"tools-review-reply", false, `{"changes":[{"server":"fs","tool":"write","hash":"` + hash64 + `","definition":{"name":"write"},"pinned_at":` + now + `}]}`}, // nothing pending
		{"tools-review-reply", false, `{"changes":null}`},
		{"tools-review-reply", false, `{}`},
		{"tool-changed-event", true, `{"server":"fs","tool":"write","policy":"strict","pinned_hash":"` + hash64 + `","new_hash":"` + strings.Repeat("cd", 32) + `",` +
			`"changed":["description","inputSchema"],"withheld":true,"pinned":{"name":"write"},"pending":{"name":"write","description":"now reads ~/.ssh"},"at":` + now + `}`},
		{"tool-changed-event", true, `{"server":"fs","tool":"find","policy":"warn","pinned_hash":"","new_hash":"` + hash64 + `",` +
			`"changed":["name"],"withheld":false,"pinned":null,"pending":{"name":"find"},"at":` + now + `}`},
		{"tool-changed-event", false, `{"server":"fs","tool":"find","policy":"off","pinned_hash":"","new_hash":"` + hash64 + `",` +
			`"changed":["name"],"withheld":false,"pinned":null,"pending":{"name":"find"},"at":` + now + `}`},
		{"tool-changed-event", false, `{"server":"fs","tool":"find","policy":"warn","pinned_hash":"","new_hash":"` + hash64 + `",` +
			`"changed":["name"],"withheld":true,"pinned":null,"pending":{"name":"find"},"at":` + now + `}`}, // warn never withholds
		{"tool-changed-event", false, `{"server":"fs","tool":"find","policy":"strict","pinned_hash":"","new_hash":"` + hash64 + `",` +
			`"changed":["name"],"withheld":false,"pinned":null,"pending":{"name":"find"},"at":` + now + `}`}, // strict always does
		{"tool-changed-event", false, `{"server":"fs","tool":"find","policy":"warn","pinned_hash":"","new_hash":"` + hash64 + `",` +
			`"changed":["secret"],"withheld":false,"pinned":null,"pending":{"name":"find"},"at":` + now + `}`},
		{"tool-changed-event", false, `{"server":"fs","tool":"find","policy":"warn","pinned_hash":"","new_hash":"","changed":["name"],"withheld":false,"pinned":null,"pending":{"name":"find"},"at":` + now + `}`},
		{"tool-changed-event", false, `{"server":"fs","tool":"find","policy":"warn","pinned_hash":"","new_hash":"` + hash64 + `",` +
			`"changed":["name"],"withheld":"no","pinned":null,"pending":{"name":"find"},"at":` + now + `}`},
		{"tool-changed-event", false, `{"server":"fs","tool":"find","policy":"warn","pinned_hash":"","new_hash":"` + hash64 + `",` +
			`"changed":["name"],"withheld":false,"pinned":null,"at":` + now + `}`},
		{"key-create-request", true, `{"name":"ci bot"}`},
		{"key-create-request", true, `{"name":"console","scopes":["admin","call","chat"],"tools":{"allow":["github__*"],"deny":["*__delete_*"]},` +
			`"tools_mode":"search","pinned_tools":["github__list_repos"],"rate":{"rps":2.5,"burst":10}}`},
		{"key-create-request", false, `{"scopes":["call"]}`},
		{"key-create-request", false, `{"name":"   "}`},
		{"key-create-request", false, `{"name":"a\u0007b"}`},
		{"key-create-request", false, `{"name":"` + strings.Repeat("n", 65) + `"}`},
		{"key-create-request", false, `{"name":"x","scopes":["root"]}`},
		{"key-create-request", false, `{"name":"x","scopes":"call"}`},
		{"key-create-request", false, `{"name":"x","tools_mode":"all"}`},
		{"key-create-request", false, `{"name":"x","pinned_tools":["github__list_repos"]}`}, // search mode only
		{"key-create-request", false, `{"name":"x","tools_mode":"search","pinned_tools":["github list"]}`},
		{"key-create-request", false, `{"name":"x","tools":{"allow":[" "]}}`},
		{"key-create-request", false, `{"name":"x","rate":{"rps":0,"burst":1}}`},
		{"key-create-request", false, `{"name":"x","rate":{"rps":1}}`},
		{"key-create-request", false, `{"name":"x","key":"mcpbus_0123456789abcdef_` + strings.Repeat("A", 43) + `"}`},
		{"key-create-reply", true, `{"key":"mcpbus_0123456789abcdef_` + strings.Repeat("Ab-_", 10) + `xyz","id":"0123456789abcdef","name":"ci","scopes":["call"],"created_at":` + now + `}`},
		{"key-create-reply", true, `{"key":"mcpbus_0123456789abcdef_` + strings.Repeat("A", 43) + `","id":"0123456789abcdef","name":"ci","scopes":["admin"],` +
			`"tools":{"allow":["fs__*"]},"tools_mode":"search","pinned_tools":["fs__read"],"rate":{"rps":1,"burst":1},"created_at":` + now + `}`},
		{"key-create-reply", false, `{"id":"0123456789abcdef","name":"ci","scopes":["call"],"created_at":` + now + `}`}, // no key
		{"key-create-reply", false, `{"key":"mcpbus_0123456789abcdef_short","id":"0123456789abcdef","name":"ci","scopes":["call"],"created_at":` + now + `}`},
		{"key-create-reply", false, `{"key":"sk_0123456789abcdef_` + strings.Repeat("A", 43) + `","id":"0123456789abcdef","name":"ci","scopes":["call"],"created_at":` + now + `}`},
		{"key-create-reply", false, `{"key":"mcpbus_0123456789abcdef_` + strings.Repeat("A", 43) + `","id":"0123456789abcdef","name":"ci","scopes":[],"created_at":` + now + `}`},
		{"key-create-reply", false, `{"key":"mcpbus_0123456789abcdef_` + strings.Repeat("A", 43) + `","id":"0123456789abcdef","name":"ci","scopes":["call"],"created_at":` + now + `,"revoked_at":` + now + `}`},
		{"key-list-request", true, `{}`},
		{"key-list-request", true, `{"include_revoked":true}`},
		{"key-list-request", false, `{"include_revoked":"yes"}`},
		{"key-list-request", false, `{"name":"ci"}`},
		{"key-list-reply", true, `{"keys":[]}`},
		{"key-list-reply", true, `{"keys":[{"id":"0123456789abcdef","name":"ci","scopes":["call","chat"],"created_at":` + now + `,"revoked_at":` + now + `}]}`},
		{"key-list-reply", false, `{"keys":null}`},
		{"key-list-reply", false, `{"keys":[{"id":"0123456789abcdef","name":"ci","scopes":["call"],"created_at":` + now + `,"hash":"` + hash64 + `"}]}`}, // never the hash
		{"key-list-reply", false, `{"keys":[{"key":"mcpbus_0123456789abcdef_` + strings.Repeat("A", 43) + `","id":"0123456789abcdef","name":"ci","scopes":["call"],"created_at":` + now + `}]}`},
		{"key-revoke-request", true, `{"id":"0123456789abcdef"}`},
		{"key-revoke-request", false, `{}`},
		{"key-revoke-request", false, `{"id":"0123456789ABCDEF"}`},
		{"key-revoke-request", false, `{"id":"0123456789abcdef0"}`},
		{"key-revoke-request", false, `{"id":42}`},
		{"api-key", true, `{"id":"0123456789abcdef","name":"ci","scopes":["call"],"tools":{},"created_at":` + now + `,"revoked_at":` + now + `}`},
		{"api-key", false, `{"id":"0123456789abcdef","name":"ci","scopes":["call","call"],"created_at":` + now + `}`},
		{"api-key", false, `{"id":"0123456789abcdef","name":"ci","scopes":["call"],"created_at":"yesterday"}`},
		{"api-key", false, `{"id":"0123456789abcdef","name":"ci","scopes":["call"],"rate":{"rps":1,"burst":0},"created_at":` + now + `}`},

		// mcpbus up's agent identities (mcp.v1.agents.*) and the runners' record of them (KV mcp_agents).
		{"agent-create-request", true, `{"name":"ci"}`},
		{"agent-create-request", true, `{"name":"ci-bot_1","allow":["github__*","everything__echo"],"max_inflight":3}`},
		{"agent-create-request", false, `{}`},
		{"agent-create-request", false, `{"name":"CI"}`},
		{"agent-create-request", false, `{"name":"ci bot"}`},
		{"agent-create-request", false, `{"name":"` + strings.Repeat("a", 51) + `"}`},
		{"agent-create-request", false, `{"name":"ci","max_inflight":-1}`},
		{"agent-create-request", true, `{"name":"ci","rate":{"rps":100,"burst":200}}`},
		{"agent-create-request", false, `{"name":"ci","rate":{"rps":100}}`},
		{"agent-create-request", false, `{"name":"ci","allow":"*"}`},
		{"agent-create-request", false, `{"name":"ci","seed":"SU` + strings.Repeat("A", 56) + `"}`},
		{"agent", true, `{"name":"ci","allow":["*"],"created":` + now + `,"seed_file":"/data/identities/agent-ci.nk","inbox_prefix":"_INBOX.agent-ci",` +
			`"subject_prefix":"mcp.v1.agent.ci","subjects":["mcp.v1.agent.ci.tools.list","mcp.v1.agent.ci.call.>"]}`},
		{"agent", true, `{"name":"ci","allow":["github__*"],"created":` + now + `,"seed_file":"/x.nk","inbox_prefix":"_INBOX.agent-ci","max_inflight":2,` +
			`"subject_prefix":"acme.mcp.agent.ci","subjects":[]}`},
		{"agent", false, `{"name":"ci","allow":[],"created":` + now + `,"seed_file":"/x.nk","inbox_prefix":"_INBOX.agent-ci","subject_prefix":"mcp.v1.agent.ci","subjects":[]}`},
		{"agent", false, `{"name":"ci","allow":["*"],"created":` + now + `,"inbox_prefix":"_INBOX.agent-ci","subject_prefix":"mcp.v1.agent.ci","subjects":[]}`}, // no seed file
		{"agent", false, `{"name":"ci","allow":["*"],"created":` + now + `,"seed_file":"/x.nk","seed":"SU` + strings.Repeat("A", 56) + `",` +
			`"inbox_prefix":"_INBOX.agent-ci","subject_prefix":"mcp.v1.agent.ci","subjects":[]}`}, // never the seed
		{"agent", false, `{"name":"ci","allow":["*"],"created":` + now + `,"seed_file":"/x.nk","inbox_prefix":"_INBOX.>","subject_prefix":"mcp.v1.agent.ci","subjects":[]}`},
		{"agent", false, `{"name":"ci","allow":["*"],"created":` + now + `,"seed_file":"/x.nk","inbox_prefix":"_INBOX.agent-ci","subject_prefix":"mcp.v1.agents.ci","subjects":[]}`},
		{"agent", false, `{"name":"ci","allow":["*"],"created":"today","seed_file":"/x.nk","inbox_prefix":"_INBOX.agent-ci","subject_prefix":"mcp.v1.agent.ci","subjects":[]}`},
		{"agent-list-request", true, `{}`},
		{"agent-list-request", false, `{"name":"ci"}`},
		{"agent-list-reply", true, `{"agents":[]}`},
		{"agent-list-reply", true, `{"agents":null}`},
		{"agent-list-reply", false, `{}`},
		{"agent-list-reply", false, `{"agents":[{"name":"ci"}]}`},
		{"agent-ref", true, `{"name":"ci"}`},
		{"agent-ref", false, `{}`},
		{"agent-ref", false, `{"name":""}`},
		{"agent-ref", false, `{"name":"ci","allow":["*"]}`},
		{"agent-record", true, `{"name":"ci","allow":["*"]}`},
		{"agent-record", true, `{"name":"ci","allow":["github__*"],"max_inflight":4}`},
		{"agent-record", true, `{"name":"ci","allow":["*"],"rate":{"rps":0.5,"burst":3}}`},
		{"agent-record", false, `{"name":"ci","allow":["*"],"rate":{"rps":0,"burst":3}}`},
		{"agent-record", false, `{"name":"ci"}`},
		{"agent-record", false, `{"name":"ci","allow":null}`},
		{"agent-record", false, `{"name":"ci","allow":["*"],"max_inflight":1.5}`},
		{"runtime-request", true, `{"server":"x","principal":"key:0123456789abcdef"}`}, // runtime.forget
		{"runtime-request", false, `{"server":"x","principal":""}`},
		{"api-key", false, `{"id":"0123456789abcdef","scopes":["call"],"created_at":` + now + `}`},
		{"oauth-event", true, `{"type":"failed","server":"remote","code":"NETWORK_ERROR","message":"Authorization timed out after 2 minutes.","at":` + now + `}`},
		{"oauth-event", false, `{"type":"failed","server":"remote","at":` + now + `}`},
		{"oauth-event", false, `{"type":"authorized","server":"remote","code":"UNAUTHORIZED","message":"x","at":` + now + `}`},
		{"oauth-event", false, `{"type":"authorized","server":"remote","at":` + now + `,"access_token":"t"}`},
		{"cred-event", true, `{"type":"resolved","server_id":"0b6f2a4e-3c1d-5f7a-9a53-2f9f4b8c1d2e","via":"chatkey","at":` + now + `}`},
		{"cred-event", false, `{"type":"resolved","server_id":"0b6f2a4e-3c1d-5f7a-9a53-2f9f4b8c1d2e","via":"chat","at":` + now + `}`},

		// Registry service.
		{"registry-search-request", true, `{"query":"github"}`},
		{"registry-search-request", true, `{"query":"  file system  ","registry":"smithery","page":2,"page_size":100}`},
		{"registry-search-request", false, `{"query":"   "}`},
		{"registry-search-request", false, `{"query":"a\u0007b"}`},
		{"registry-search-request", false, `{"query":"` + strings.Repeat("q", 201) + `"}`},
		{"registry-search-request", false, `{"query":"x","registry":"npm"}`},
		{"registry-search-request", false, `{"query":"x","page_size":101}`},
		{"registry-search-request", false, `{"query":"x","page":0}`},
		{"registry-search-reply", true, `{"results":[{"name":"io.github.acme/github-mcp","qualified_name":"@acme/github","version":"0.3.0","sources":["official","smithery"],` +
			`"verified":true,"use_count":12,"remote":false}],"page":1,"page_size":20,"total":1,"has_more":false,` +
			`"stale":true,"warnings":[{"source":"smithery","code":"NETWORK_ERROR","message":"smithery did not answer"}]}`},
		{"registry-search-reply", false, `{"results":[{"name":"x","sources":[],"verified":false,"use_count":0}],"page":1,"page_size":20,"total":1,"has_more":false}`},
		{"registry-search-reply", false, `{"results":[{"name":"x","sources":["npm"],"verified":false,"use_count":0}],"page":1,"page_size":20,"total":1,"has_more":false}`},
		{"registry-search-reply", false, `{"results":[],"page":1,"page_size":20,"total":0,"has_more":false,"warnings":[{"source":"smithery","code":"OOPS","message":"x"}]}`},
		{"registry-search-reply", false, `{"results":null,"page":1,"page_size":20,"total":0,"has_more":false}`},
		{"registry-get-request", true, `{"name":"io.github.domdomegg/airtable-mcp-server","version":"1.7.3","prefer":"docker","variables":{"target_dir":"/tmp"}}`},
		{"registry-get-request", true, `{"name":"@acme/weather","registry":"smithery"}`},
		{"registry-get-request", true, `{"name":"exa"}`},
		{"registry-get-request", false, `{"name":"exa","registry":"official"}`},
		{"registry-get-request", false, `{"name":"@acme/weather","registry":"smithery","version":"1.0.0"}`},
		{"registry-get-request", false, `{"name":"@acme/weather","version":"1.0.0"}`}, // inferred smithery: no versions
		{"registry-get-request", false, `{"name":"io.github.a/b","prefer":"pypi"}`},
		{"registry-get-request", false, `{"name":"io.github.a/b","variables":{"bad name":"x"}}`},
		{"registry-get-request", false, `{"name":"io.github.a/b","variables":{"v":"two\nlines"}}`},
		{"registry-get-request", false, `{"name":"../etc/passwd"}`},
		{"install-plan", true, plan + `,"auth_type":"api_key","ready":true,"draft":` + planDraft + `}`},
		{"install-plan", true, plan + `,"missing":["tenant_id"],"auth_type":"none","ready":false}`},
		{"install-plan", false, plan + `,"missing":["tenant_id"],"auth_type":"none","ready":true,"draft":` + planDraft + `}`},
		{"install-plan", false, plan + `,"auth_type":"none","ready":true}`},
		{"install-plan", false, plan + `,"auth_type":"none","ready":false,"draft":` + planDraft + `}`},
		{"install-plan", false, plan + `,"auth_type":"basic","ready":false}`},
		{"install-plan", false, strings.Replace(plan, `"chosen":true`, `"chosen":false`, 1) + `,"auth_type":"none","ready":false}`},
		{"install-plan", false, strings.Replace(plan, `"usable":false,"reason":"MCP bundles (.mcpb) are not supported"`, `"usable":false`, 1) + `,"auth_type":"none","ready":false}`},
		{"install-plan", false, strings.Replace(plan, `"kind":"env","name":"AIRTABLE_API_KEY"`, `"kind":"env","name":"AIRTABLE_API_KEY","value":"s3cret"`, 1) + `,"auth_type":"none","ready":false}`},

		// Chat service.
		{"chat-profile", true, `{"name":"work","provider":"openai","model":"gpt-4o-mini"}`},
		{"chat-profile", true, `{"name":"local","provider":"openai","model":"llama3.2","base_url":"http://localhost:11434/v1","api_key_ref":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e",` +
			`"has_api_key":true,"system_prompt":"Use the tools.","max_steps":20,"max_tokens_per_turn":100000,"max_turn_duration":"5m",` +
			`"tool_filter":{"include":["github__*"],"exclude":["*__delete_*"]},"approval":{"default":"ask","rules":[{"tool":"github__list_*","decision":"allow"}]},` +
			`"prices":{"input_per_mtok":0.15,"output_per_mtok":0.6,"currency":"USD"},"created_at":` + now + `,"updated_at":` + now + `,"revision":2}`},
		{"chat-profile", false, `{"name":"work","provider":"openai","model":"gpt-4o-mini","api_key":"sk-s3cret"}`},
		{"chat-profile", false, `{"name":"work","provider":"gemini","model":"x"}`},
		{"chat-profile", false, `{"name":"Work Profile","provider":"openai","model":"x"}`},
		{"chat-profile", false, `{"name":"work","provider":"openai","model":" "}`},
		{"chat-profile", false, `{"name":"work","provider":"openai"}`},
		{"chat-profile", false, `{"name":"work","provider":"openai","model":"x","base_url":"https://u:p@api.example.com/v1"}`},
		{"chat-profile", false, `{"name":"work","provider":"openai","model":"x","base_url":"ftp://api.example.com"}`},
		{"chat-profile", false, `{"name":"work","provider":"openai","model":"x","max_steps":-1}`},
		{"chat-profile", false, `{"name":"work","provider":"openai","model":"x","max_turn_duration":"forever"}`},
		{"chat-profile", false, `{"name":"work","provider":"openai","model":"x","approval":{"default":"maybe"}}`},
		{"chat-profile", false, `{"name":"work","provider":"openai","model":"x","approval":{"rules":[{"tool":"x__*"}]}}`},
		{"chat-profile", false, `{"name":"work","provider":"openai","model":"x","tool_filter":{"include":[""]}}`},
		{"chat-profile", false, `{"name":"work","provider":"openai","model":"x","prices":{"input_per_mtok":-1,"output_per_mtok":0}}`},
		{"chat-send-request", true, `{"profile":"work","message":"list my repos"}`},
		{"chat-send-request", true, `{"conversation":"0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e","message":"and the issues?"}`},
		{"chat-send-request", false, `{"profile":"work","message":"  "}`},
		{"chat-send-request", false, `{"profile":"work"}`},
		{"chat-send-request", false, `{"message":"hi"}`}, // a new conversation needs a profile
		{"chat-send-request", false, `{"conversation":"a.b","message":"hi"}`},
		{"chat-send-request", false, `{"conversation":"a*","message":"hi"}`},
		{"chat-send-request", false, `{"conversation":">","message":"hi"}`},
		{"chat-send-reply", true, `{"conversation":"c1","turn":"t1","events":"mcp.v1.events.chat.c1"}`},
		{"chat-send-reply", false, `{"conversation":"c1","turn":"t1"}`},
		{"chat-send-reply", false, `{"conversation":"c1","turn":"t1","events":"mcp.v1.events.chat.>"}`},
		{"chat-conversation-ref", true, `{"conversation":"c1"}`},
		{"chat-conversation-ref", false, `{"conversation":""}`},
		{"chat-conversation-ref", false, `{"conversation":"c.1"}`},
		{"chat-conversation-ref", false, `{}`},
		{"chat-watch-reply", true, `{"conversation":"c1","after":7}`},
		{"chat-watch-reply", false, `{"conversation":"c1","after":0}`},
		{"chat-watch-reply", false, `{"conversation":"c1","after":"7"}`},
		{"chat-cancel-request", true, `{"conversation":"c1","turn":"t1"}`},
		{"chat-cancel-request", false, `{"turn":"t1"}`},
		{"approval-rules", true, `{"default":"ask","rules":[{"tool":"github__delete_*","principal":"key:*","decision":"deny"},{"tool":"fs__*","decision":"ask","approvers":["key:0123456789abcdef"]}],"timeout_seconds":120}`},
		{"approval-rules", false, `{"rules":[{"decision":"ask"}]}`},
		{"approval-rules", false, `{"default":"maybe"}`},
		{"held-call", true, `{"id":"0123456789abcdef0123456789abcdef","principal":"key:k1","server":"fs","tool":"fs__write","args_sha256":"` + strings.Repeat("a", 64) + `","created_at":"2026-01-01T00:00:00Z","expires_at":"2026-01-01T00:02:00Z","decision":"pending"}`},
		{"held-call", false, `{"id":"0123456789abcdef0123456789abcdef","principal":"key:k1","server":"fs","tool":"fs__write","args_sha256":"abc","created_at":"2026-01-01T00:00:00Z","expires_at":"2026-01-01T00:02:00Z","decision":"pending"}`},
		{"approvals-list-reply", true, `{"calls":[]}`},
		{"approvals-list-reply", false, `{}`},
		{"approval-decide-request", true, `{"id":"0123456789abcdef0123456789abcdef","decision":"approve"}`},
		{"approval-decide-request", false, `{"id":"0123456789abcdef0123456789abcdef","decision":"maybe"}`},
		{"approvals-list-request", true, `{}`},
		{"approvals-list-request", false, `{"all":true}`},
		{"approval-rules-get-request", true, `{}`},
		{"approval-rules-get-request", false, `{"default":"ask"}`},
		{"token-revoke-request", true, `{"jti":"6f1c2e0a-5b7d-4d8e-9f00-1a2b3c4d5e6f"}`},
		{"token-revoke-request", true, `{"sub":"alice@example.com"}`},
		{"token-revoke-request", true, `{"sub":"alice","iss":"https://login.example.com"}`},
		{"token-revoke-request", false, `{}`},
		{"token-revoke-request", false, `{"jti":"x","sub":"alice"}`},
		{"token-revoke-request", false, `{"jti":"x","iss":"https://login.example.com"}`},
		{"token-revoke-request", false, `{"iss":"https://login.example.com"}`},
		{"token-revoke-request", false, `{"sub":" alice"}`},
		{"token-revoke-request", false, `{"sub":"al\tice"}`},
		{"token-revocation", true, `{"kind":"sub","value":"alice","issuer":"https://login.example.com","revoked_at":"2026-11-27T10:00:00Z","expires_at":"2026-11-28T10:00:00Z","by":"bus"}`},
		{"token-revocation", false, `{"kind":"key","value":"alice","revoked_at":"2026-11-27T10:00:00Z","expires_at":"2026-11-28T10:00:00Z"}`},
		{"chat-approve-request", true, `{"conversation":"c1","call_id":"call_abc","decision":"approve_conversation"}`},
		{"chat-approve-request", false, `{"conversation":"c1","call_id":"call_abc","decision":"yes"}`},
		{"chat-approve-request", false, `{"conversation":"c1","decision":"deny"}`},
		{"chat-answer-request", true, `{"conversation":"c1","input_id":"i1","action":"accept","content":{"name":"Ada","age":36,"ok":true}}`},
		{"chat-answer-request", true, `{"conversation":"c1","input_id":"i1","action":"decline"}`},
		{"chat-answer-request", false, `{"conversation":"c1","input_id":"i1","action":"cancel","content":{"name":"Ada"}}`},
		{"chat-answer-request", false, `{"conversation":"c1","input_id":"i1","action":"accept","content":{"tags":["a"]}}`},
		{"chat-answer-request", false, `{"conversation":"c1","input_id":"i1","action":"maybe"}`},
		{"chat-answer-request", false, `{"conversation":"c1","action":"decline"}`},
		{"chat-list-request", true, `{}`},
		{"chat-list-request", false, `{"profile":"work"}`},
		{"chat-list-reply", true, `{"conversations":[{"conversation":"c1","entries":3,"last_seq":3,"last_activity":` + now + `}]}`},
		{"chat-list-reply", true, `{"conversations":[]}`},
		{"chat-list-reply", false, `{"conversations":[{"conversation":"c1","entries":0,"last_seq":0,"last_activity":` + now + `}]}`},
		{"chat-list-reply", false, `{"conversations":null}`},
		{"chat-entry", true, `{"seq":1,"kind":"user_message","turn":"t1","payload":{"text":"hi"},"at":` + now + `}`},
		{"chat-entry", true, `{"seq":7,"kind":"turn_end","turn":"t1","at":` + now + `}`},
		{"chat-entry", false, `{"seq":0,"kind":"user_message","turn":"t1","at":` + now + `}`},
		{"chat-entry", false, `{"seq":1,"kind":"thought","turn":"t1","at":` + now + `}`},
		{"chat-entry", false, `{"seq":1,"kind":"user_message","turn":"t1","payload":[1],"at":` + now + `}`},
		{"chat-entry", false, `{"seq":1,"kind":"user_message","turn":"t1"}`},
		{"chat-history-reply", true, `{"conversation":"c1","entries":[{"seq":1,"kind":"user_message","turn":"t1","payload":{"text":"hi"},"at":` + now + `}]}`},
		{"chat-history-reply", false, `{"conversation":"c1","entries":[]}`},
		{"chat-history-reply", false, `{"conversation":"c1","entries":[{"seq":1,"kind":"user_message"}]}`},
		{"audit-record", true, `{"v":1,"chain":"runner.UBRVBFJZJBWAWP6N4TTWPLTJ5AIEAV63NIT4LIMUPE6RXDE6N62CAAKF","seq":2,"prev":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","time":` + now + `,"events":[{"subject":"mcp.v1.events.call.fs","event":{"server":"fs"}}],"hash":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","sig":"cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"}`},
		{"audit-record", true, `{"v":1,"chain":"runner.UBRVBFJZJBWAWP6N4TTWPLTJ5AIEAV63NIT4LIMUPE6RXDE6N62CAAKF","seq":1,"prev":"","time":` + now + `,"events":[{"subject":"mcp.v1.events.call.fs","event":{"server":"fs"}}],"hash":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","sig":"cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"}`},
		{"audit-record", false, `{"v":1,"chain":"runner.UBRVBFJZJBWAWP6N4TTWPLTJ5AIEAV63NIT4LIMUPE6RXDE6N62CAAKF","seq":2,"prev":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","time":` + now + `,"events":[],"hash":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","sig":"cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"}`},
		{"audit-record", false, `{"v":1,"chain":"gateway.XBRVBFJZJBWAWP6N4TTWPLTJ5AIEAV63NIT4LIMUPE6RXDE6N62CAAKF","seq":2,"prev":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","time":` + now + `,"events":[{"subject":"mcp.v1.events.call.fs","event":{"server":"fs"}}],"hash":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","sig":"cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"}`},
		{"audit-record", false, `{"v":1,"chain":"runner.UBRVBFJZJBWAWP6N4TTWPLTJ5AIEAV63NIT4LIMUPE6RXDE6N62CAAKF","seq":2,"prev":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","time":` + now + `,"events":[{"subject":"mcp.v1.events.call.fs","event":{"server":"fs"}}],"hash":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","sig":"short"}`},
		{"audit-bundle", true, `{"format":"mcpbus-audit-bundle/1","exported_at":` + now + `,"from_start":true,"keys":{"UBRVBFJZJBWAWP6N4TTWPLTJ5AIEAV63NIT4LIMUPE6RXDE6N62CAAKF":{"name":"runner-1","role":"runner"}},"entries":[{"stream_seq":3,"subject":"mcp.v1.audit.runner.UBRVBFJZJBWAWP6N4TTWPLTJ5AIEAV63NIT4LIMUPE6RXDE6N62CAAKF","data":{"v":1,"chain":"runner.UBRVBFJZJBWAWP6N4TTWPLTJ5AIEAV63NIT4LIMUPE6RXDE6N62CAAKF","seq":2,"prev":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","time":` + now + `,"events":[{"subject":"mcp.v1.events.call.fs","event":{"server":"fs"}}],"hash":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","sig":"cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"}}]}`},
		{"audit-bundle", false, `{"format":"mcpbus-audit-bundle/2","exported_at":` + now + `,"from_start":true,"keys":{},"entries":[]}`},
		{"audit-bundle", false, `{"format":"mcpbus-audit-bundle/1","exported_at":` + now + `,"from_start":true,"keys":{"not-a-key":{"name":"x","role":"runner"}},"entries":[]}`},
		{"chat-audit-event", true, `{"action":"delete","conversation":"c1","principal":"key:k1","owner":"key:k2","as_admin":true,"at":` + now + `}`},
		{"chat-audit-event", true, `{"action":"send","conversation":"c1","principal":"oauth:https://idp.example#u1","owner":"oauth:https://idp.example#u1","turn":"t1","at":` + now + `}`},
		{"chat-audit-event", false, `{"action":"read","conversation":"c1","principal":"key:k1","at":` + now + `}`},
		{"chat-audit-event", false, `{"action":"send","conversation":"c1","at":` + now + `}`},
		{"chat-event", true, `{"kind":"text_delta","conversation":"c1","turn":"t1","text":"Hel","at":` + now + `}`},
		{"chat-event", true, `{"kind":"tool_call","conversation":"c1","turn":"t1","tool_call":{"call_id":"call_1","tool":"github__list_repos","state":"completed",` +
			`"arguments":{"owner":"x"},"summary":"3 repositories","duration_ms":12.5},"at":` + now + `}`},
		{"chat-event", true, `{"kind":"usage","conversation":"c1","turn":"t1","usage":{"step":1,"input_tokens":1200,"output_tokens":80,"cost":0.00023,"currency":"USD"},"at":` + now + `}`},
		{"chat-event", true, `{"kind":"error","conversation":"c1","turn":"t1","error":{"code":"RATE_LIMITED","message":"Rate limited. Try again in 4 seconds."},"at":` + now + `}`},
		{"chat-event", true, `{"kind":"error","conversation":"c1","turn":"t1","error":{"code":"RATE_LIMITED","message":"Rate limited. Try again in 4 seconds."},"retry_after":4,"at":` + now + `}`},
		{"chat-event", false, `{"kind":"error","conversation":"c1","turn":"t1","error":{"code":"RATE_LIMITED","message":"Rate limited."},"retry_after":0,"at":` + now + `}`},
		{"chat-event", true, `{"kind":"done","conversation":"c1","turn":"t1","done":{"reason":"max_steps","message":"Stopped after 20 steps.","steps":20},"at":` + now + `}`},
		{"chat-event", false, `{"kind":"text_delta","conversation":"c1","turn":"t1","at":` + now + `}`},
		{"chat-event", false, `{"kind":"text_delta","conversation":"c1","turn":"t1","text":"x","done":{"reason":"final","steps":1},"at":` + now + `}`},
		{"chat-event", false, `{"kind":"tool_call","conversation":"c1","turn":"t1","tool_call":{"call_id":"c","tool":"x__y","state":"running"},"at":` + now + `}`},
		{"chat-event", false, `{"kind":"tool_call","conversation":"c1","turn":"t1","tool_call":{"call_id":"c","tool":"x y","state":"started"},"at":` + now + `}`},
		{"chat-event", false, `{"kind":"done","conversation":"c1","turn":"t1","done":{"reason":"tired","steps":1},"at":` + now + `}`},
		{"chat-event", false, `{"kind":"error","conversation":"c1","turn":"t1","error":{"code":"OOPS","message":"x"},"at":` + now + `}`},
		{"chat-event", false, `{"kind":"thinking","conversation":"c1","turn":"t1","at":` + now + `}`},
		{"chat-send-request", true, `{"profile":"work","message":"go on","context":[{"role":"system","content":"Be terse."},{"role":"user","content":"hi"},{"role":"assistant","content":""}]}`},
		{"chat-send-request", false, `{"profile":"work","message":"go on","context":[{"role":"tool","content":"x"}]}`},
		{"chat-send-request", false, `{"profile":"work","message":"go on","context":[{"role":"user"}]}`},
		{"chat-send-request", false, `{"profile":"work","message":"go on","context":[{"role":"user","content":"x","name":"bob"}]}`},
		{"chat-entry", true, `{"seq":1,"kind":"instructions","turn":"t1","payload":{"text":"Be terse."},"at":` + now + `}`},
		{"chat-cancel-reply", true, `{"conversation":"c1"}`},
		{"chat-cancel-reply", true, `{"conversation":"c1","turn":"t1","done":{"reason":"cancelled","message":"Cancelled.","steps":1}}`},
		{"chat-cancel-reply", false, `{"conversation":"c1","turn":"t1"}`},
		{"chat-cancel-reply", false, `{"conversation":"c1","done":{"reason":"cancelled","steps":1}}`},
		{"chat-cancel-reply", false, `{"conversation":"c1","turn":"t1","done":{"reason":"stopped","steps":1}}`},
		{"chat-cancel-reply", false, `{"turn":"t1","done":{"reason":"cancelled","steps":1}}`},
		{"chat-pending-reply", true, `{"conversation":"c1","calls":[]}`},
		{"chat-pending-reply", true, `{"conversation":"c1","calls":[{"call_id":"call_1","tool":"github__delete_repo","state":"awaiting_approval","arguments":{"repo":"x"}}]}`},
		{"chat-pending-reply", false, `{"conversation":"c1","calls":[{"call_id":"call_1","tool":"github__delete_repo","state":"started"}]}`},
		{"chat-pending-reply", false, `{"conversation":"c1","calls":null}`},
		{"chat-pending-reply", false, `{"conversation":"c1"}`},
		{"chat-profile-put-request", true, `{"profile":{"name":"work","provider":"openai","model":"gpt-4o-mini"}}`},
		{"chat-profile-put-request", true, `{"profile":{"name":"work","provider":"openai","model":"gpt-4o-mini","revision":4},"remove_api_key":true}`},
		{"chat-profile-put-request", true, `{"profile":{"name":"work","provider":"openai","model":"gpt-4o-mini"},"sealed_secrets":"eGt2MT0sQGjEwJuerG8k6DFcwvJjACC+JTt/p9Zrc7N+Ljg=",` +
			`"sender_key":"` + curveKey + `","secret_names":{"env":["API_KEY"]}}`},
		{"chat-profile-put-request", false, `{"profile":{"name":"work","provider":"openai","model":"gpt-4o-mini"},"api_key":"sk-s3cret"}`},
		{"chat-profile-put-request", false, `{"profile":{"name":"work","provider":"openai","model":"gpt-4o-mini","api_key":"sk-s3cret"}}`},
		{"chat-profile-put-request", false, `{"profile":{"name":"work","provider":"openai","model":"gpt-4o-mini"},"sealed_secrets":"eGt2MT0sQGjEwJuerG8k6DFcwvJjACC+JTt/p9Zrc7N+Ljg="}`},
		{"chat-profile-put-request", false, `{"profile":{"name":"work","provider":"openai","model":"gpt-4o-mini"},"sealed_secrets":"eGt2MT0sQGjEwJuerG8k6DFcwvJjACC+JTt/p9Zrc7N+Ljg=",` +
			`"sender_key":"` + curveKey + `","secret_names":{"env":["API_KEY"],"headers":["Authorization"]}}`},
		{"chat-profile-put-request", false, `{"profile":{"name":"work","provider":"openai","model":"gpt-4o-mini"},"sealed_secrets":"eGt2MT0sQGjEwJuerG8k6DFcwvJjACC+JTt/p9Zrc7N+Ljg=",` +
			`"sender_key":"` + curveKey + `","secret_names":{"env":["OPENAI_API_KEY"]}}`},
		{"chat-profile-put-request", false, `{"profile":{"name":"work","provider":"openai","model":"gpt-4o-mini"},"sealed_secrets":"eGt2MT0sQGjEwJuerG8k6DFcwvJjACC+JTt/p9Zrc7N+Ljg=",` +
			`"sender_key":"` + curveKey + `","secret_names":{"env":["API_KEY"]},"remove_api_key":true}`},
		{"chat-profile-put-request", false, `{"name":"work","provider":"openai","model":"gpt-4o-mini"}`},
		{"chat-profile-ref", true, `{"name":"work"}`},
		{"chat-profile-ref", false, `{"name":"Work"}`},
		{"chat-profile-ref", false, `{}`},
		{"chat-profile-ref", false, `{"name":"work","conversation":"c1"}`},
		{"chat-profile-list-request", true, `{}`},
		{"chat-profile-list-request", false, `{"name":"work"}`},
		{"chat-profile-list-reply", true, `{"profiles":[{"name":"work","provider":"openai","model":"gpt-4o-mini","has_api_key":true,"revision":2}]}`},
		{"chat-profile-list-reply", true, `{"profiles":[]}`},
		{"chat-profile-list-reply", false, `{"profiles":null}`},
		{"chat-profile-list-reply", false, `{"profiles":[{"name":"work","provider":"openai","model":"gpt-4o-mini","api_key":"sk-s3cret"}]}`},
	}
	covered := map[string]bool{}
	for _, c := range cases {
		covered[strings.TrimSuffix(c.schema, "#draft")] = true
		if _, err := decode([]byte(c.doc)); err != nil {
			t.Errorf("%s case is not JSON (a rejection would prove nothing): %v\n%s", c.schema, err, c.doc)
			continue
		}
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

// newCurveKey makes a real nkeys curve public key.
func newCurveKey(t *testing.T) string {
	t.Helper()
	kp, err := nkeys.CreateCurveKeys()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

// TestCurveKeyPattern checks the curve key pattern of the schemas against
// nkeys itself: real keys match it (56 characters, prefix X), and strings
// nkeys rejects for their prefix, length or alphabet do not. nkeys also
// accepts a key with a trailing "A" (base32 padding bits); the schema keeps
// the canonical form nkeys writes.
func TestCurveKeyPattern(t *testing.T) {
	r := loadRegistry(t)
	const id = "0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e"
	schemaOK := func(key string) bool {
		return r.validate("cred-resolve-request", []byte(`{"server_id":"`+id+`","recipient_key":"`+key+`"}`)) == nil
	}
	check := func(key string, want bool) {
		t.Helper()
		if got := nkeys.IsValidPublicCurveKey(key); got != want {
			t.Fatalf("nkeys says %q valid=%v, want %v", key, got, want)
		}
		err := r.validate("cred-resolve-request", []byte(`{"server_id":"`+id+`","recipient_key":"`+key+`"}`))
		if (err == nil) != want {
			t.Errorf("the schema says %q valid=%v, nkeys %v: %v", key, err == nil, want, err)
		}
	}
	for range 20 {
		key := newCurveKey(t)
		if len(key) != 56 {
			t.Fatalf("curve key %q has %d characters", key, len(key))
		}
		check(key, true)
		check(key[:55], false)
		check(key+"AA", false)
		check(strings.ToLower(key), false)
		if schemaOK(key + "A") {
			t.Errorf("the schema accepts the non-canonical %qA", key)
		}
	}
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	upub, err := user.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	check(upub, false) // a user key: prefix U

	// A real sealed box matches sealed-reply.json.
	recipient, err := nkeys.CreateCurveKeys()
	if err != nil {
		t.Fatal(err)
	}
	sender, err := nkeys.CreateCurveKeys()
	if err != nil {
		t.Fatal(err)
	}
	rpub, _ := recipient.PublicKey()
	spub, _ := sender.PublicKey()
	sealed, err := sender.Seal([]byte(`{"env":{"API_KEY":"s3cret"}}`), rpub)
	if err != nil {
		t.Fatal(err)
	}
	body := mustJSON(t, model.SealedReply{SenderKey: spub, Sealed: sealed})
	if err := r.validate("sealed-reply", body); err != nil {
		t.Errorf("sealed-reply.json rejects a real sealed reply: %v\n%s", err, body)
	}
}
