package schema

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/chat/chat"
	"github.com/mcpbus/mcpbus/services/config/config"
	"github.com/mcpbus/mcpbus/services/credential/credential"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
	regsvc "github.com/mcpbus/mcpbus/services/registry/registry"
	"github.com/mcpbus/mcpbus/services/runner/runner"
)

// testServer is the go-sdk test MCP server, built once in TestMain.
var testServer string

func TestMain(m *testing.M) {
	testkit.Main(m, &testServer)
}

// TestSchemasCompile compiles every schema file (2020-12, $id by file name)
// and checks that their cross-references name files that exist.
func TestSchemasCompile(t *testing.T) {
	r := loadRegistry(t)
	want := []string{
		"call-arguments", "call-event", "call-result", "cancel-request", "catalog", "control-request", "error",
		"mcp-config", "progress-event", "client-request", "rpc-request", "runtime-request", "runtime-status-reply", "servers-file",
		"status", "tool", "tools-list-reply", "tools-list-request", "tools-search-request", "tools-search-reply",
		"config-create-request", "config-update-request", "config-ref", "config-list-request", "config-list-reply",
		"config-delete-reply", "config-import-request", "config-import-reply", "config-export-request",
		"config-export-reply", "config-history-reply", "config-rollback-request", "config-event", "slug-reservation",
		"cred-set-request", "cred-delete-request", "cred-describe-request", "cred-description", "cred-resolve-request", "cred-event",
		"cred-key-request", "cred-key-reply", "cred-chatkey-request", "cred-chatkey-reply", "cred-oauthclient-request", "cred-forget-request", "cred-forget-reply", "sealed-credentials", "sealed-reply", "registry-search-request", "registry-search-reply", "registry-get-request", "install-plan",
		"chat-profile", "chat-send-request", "chat-send-reply", "chat-conversation-ref", "chat-watch-reply", "chat-history-reply", "chat-list-request",
		"chat-list-reply", "chat-cancel-request", "chat-cancel-reply", "chat-approve-request", "chat-answer-request", "chat-pending-reply", "chat-event", "chat-entry",
		"chat-profile-put-request", "chat-profile-ref", "chat-profile-list-request", "chat-profile-list-reply",
		"oauth-start-request", "oauth-start-reply", "oauth-event", "oauth-callback-request", "oauth-callback-reply",
		"gateway-retry-request", "gateway-retry-reply",
		"task", "task-create-request", "task-request", "task-list-request", "task-list-reply", "task-run",
		"approvals-list-request", "approval-rules-get-request", "token-revoke-request", "token-revocation",
		"approval-rules", "held-call", "approvals-list-reply", "approval-decide-request",
		"audit-record", "audit-bundle", "tool-reviewed-event", "gateway-audit-event", "tools-approve-request", "tool-pin",
		"tools-review-request", "tools-review-reply", "tool-changed-event", "resource-updated-event", "list-changed-event",
		"key-create-request", "key-create-reply", "key-list-request", "key-list-reply", "key-revoke-request", "api-key",
		"agent-create-request", "agent", "agent-list-request", "agent-list-reply", "agent-ref", "agent-record",
	}
	for _, name := range want {
		if _, ok := r.schemas[name]; !ok {
			t.Errorf("schemas/%s.json is missing", name)
		}
	}
	for _, name := range r.files {
		var rs [][2]string
		refs(r.docs[name], "", &rs)
		for _, ref := range rs {
			file, frag, _ := strings.Cut(ref[1], "#")
			target := r.docs[name]
			if file != "" {
				doc, ok := r.docs[strings.TrimSuffix(file, ".json")]
				if !ok || path.Ext(file) != ".json" || strings.Contains(file, "/") {
					t.Errorf("%s.json%s: $ref %q names no schema file", name, ref[0], ref[1])
					continue
				}
				target = doc
			}
			if _, ok := pointer(target, frag); !ok {
				t.Errorf("%s.json%s: $ref %q does not resolve", name, ref[0], ref[1])
			}
		}
	}
}

// TestAsyncAPI checks the AsyncAPI document: YAML, version 3.0.0, every $ref
// resolves (schema files exist), operations use their channels' messages,
// channel parameters match their addresses, and the subjects and headers of
// the bus are all there.
func TestAsyncAPI(t *testing.T) {
	r := loadRegistry(t)
	doc := r.asyncapi
	if v := doc["asyncapi"]; v != "3.0.0" {
		t.Errorf("asyncapi: %v, want 3.0.0", v)
	}
	if s, _ := lookup(doc, "info", "title").(string); s == "" {
		t.Error("info.title is missing")
	}
	if s, _ := lookup(doc, "info", "version").(string); s == "" {
		t.Error("info.version is missing")
	}
	// The description names every micro service of the bus.
	desc, _ := lookup(doc, "info", "description").(string)
	for _, name := range []string{runner.ServiceName, runner.ServerServiceName, config.ServiceName, credential.ServiceName,
		regsvc.ServiceName, chat.ServiceName, auth.ServiceName, agentsService} {
		if !strings.Contains(desc, "`"+name+"`") {
			t.Errorf("info.description does not name the micro service %s", name)
		}
	}

	// Every $ref resolves; external ones name schema files beside the document.
	var rs [][2]string
	refs(doc, "", &rs)
	usedFiles := map[string]bool{}
	for _, ref := range rs {
		file, frag, _ := strings.Cut(ref[1], "#")
		var target any = doc
		if file != "" {
			clean := path.Clean(file)
			if strings.Contains(clean, "/") || path.Ext(clean) != ".json" {
				t.Errorf("%s: $ref %q is not a schema file beside %s", ref[0], ref[1], asyncAPIFile)
				continue
			}
			if _, err := os.Stat(filepath.Join(schemaDir, clean)); err != nil {
				t.Errorf("%s: $ref %q: %v", ref[0], ref[1], err)
				continue
			}
			name := strings.TrimSuffix(clean, ".json")
			usedFiles[name] = true
			target = r.docs[name]
		}
		if _, ok := pointer(target, frag); !ok {
			t.Errorf("%s: $ref %q does not resolve", ref[0], ref[1])
		}
	}
	// Every schema of a bus message is a payload of the document, directly or
	// through another schema; the servers file is a file format, not a message.
	for changed := true; changed; {
		changed = false
		for name := range usedFiles {
			var inner [][2]string
			refs(r.docs[name], "", &inner)
			for _, ref := range inner {
				if file, _, _ := strings.Cut(ref[1], "#"); file != "" && !usedFiles[strings.TrimSuffix(file, ".json")] {
					usedFiles[strings.TrimSuffix(file, ".json")] = true
					changed = true
				}
			}
		}
	}
	for _, name := range r.files {
		// servers-file and audit-bundle are files, not bus messages.
		if name != "servers-file" && name != "audit-bundle" && !usedFiles[name] {
			t.Errorf("schemas/%s.json is not referenced by %s", name, asyncAPIFile)
		}
	}

	channels, _ := doc["channels"].(map[string]any)
	operations, _ := doc["operations"].(map[string]any)
	if len(channels) == 0 || len(operations) == 0 {
		t.Fatal("no channels or operations")
	}
	placeholder := regexp.MustCompile(`\{([^}]+)\}`)
	for id, ch := range channels {
		addr, isString := lookup(ch, "address").(string)
		if !isString && lookup(ch, "address") != nil {
			t.Errorf("channel %s: address must be a string or null", id)
		}
		params, _ := lookup(ch, "parameters").(map[string]any)
		inAddr := map[string]bool{}
		for _, m := range placeholder.FindAllStringSubmatch(addr, -1) {
			inAddr[m[1]] = true
			if _, ok := params[m[1]]; !ok {
				t.Errorf("channel %s: address %s has no parameter %s", id, addr, m[1])
			}
		}
		for p := range params {
			if !inAddr[p] {
				t.Errorf("channel %s: parameter %s is not in address %q", id, p, addr)
			}
		}
		if msgs, _ := lookup(ch, "messages").(map[string]any); len(msgs) == 0 {
			t.Errorf("channel %s has no messages", id)
		}
	}
	usedChannels := map[string]bool{}
	checkOpRefs := func(op string, chRef any, msgs any) {
		ref, _ := lookup(chRef, "$ref").(string)
		ch, ok := strings.CutPrefix(ref, "#/channels/")
		if !ok || channels[ch] == nil {
			t.Errorf("operation %s: channel %q is not a channel", op, ref)
			return
		}
		usedChannels[ch] = true
		list, _ := msgs.([]any)
		if len(list) == 0 {
			t.Errorf("operation %s: no messages for channel %s", op, ch)
		}
		for _, m := range list {
			mref, _ := lookup(m, "$ref").(string)
			if !strings.HasPrefix(mref, "#/channels/"+ch+"/messages/") {
				t.Errorf("operation %s: message %q is not a message of channel %s", op, mref, ch)
			}
		}
	}
	for id, op := range operations {
		switch a := lookup(op, "action"); a {
		case "send", "receive":
		default:
			t.Errorf("operation %s: action %v", id, a)
		}
		checkOpRefs(id, lookup(op, "channel"), lookup(op, "messages"))
		if reply := lookup(op, "reply"); reply != nil {
			checkOpRefs(id+" reply", lookup(reply, "channel"), lookup(reply, "messages"))
		}
	}
	for id := range channels {
		if !usedChannels[id] {
			t.Errorf("channel %s is used by no operation", id)
		}
	}

	// The subjects of docs/design.md that exist in the code, built by the code's own subject builder.
	s := bus.NewSubjects("")
	for _, subject := range []string{
		s.ToolsList(), s.Call("srv", "tool"), s.RPC("srv"), s.Cancel("srv"), s.Control("srv"), s.ControlAll("srv"),
		s.Runtime("start"), s.Runtime("stop"), s.Runtime("restart"), s.Runtime("status"), s.Runtime("forget"),
		s.Event("status", "srv"), s.Event("call", "srv"), s.Event("config", "srv"),
		"$KV." + bus.BucketConfigs + ".id", "$KV." + bus.BucketStatus + ".srv", "$KV." + bus.BucketTools + ".srv",
		"$KV." + bus.BucketSlugs + ".srv",
		// The chat service (issue 14): its verbs, events, conversation log and profiles.
		s.Service("chat", "send"), s.Service("chat", "history"), s.Service("chat", "list"), s.Service("chat", "delete"),
		s.Service("chat", "cancel"), s.Service("chat", "approve"), s.Service("chat", "pending"), s.Service("chat", "profiles.put"),
		s.Service("chat", "profiles.get"), s.Service("chat", "profiles.list"), s.Service("chat", "profiles.delete"),
		s.Event("chat", "c1"), s.Service("chat", "log") + ".c1",
		"$KV." + bus.BucketChatProfiles + ".work",
		// OAuth of remote servers (issue 17): the gateway's flow and its outcomes.
		s.Service("oauth", "start"), s.Event("oauth", "srv"), s.OAuthCallback("0a1b"),
		// Multi round-trip retries passed between gateway instances.
		s.GatewayRetry("abcdefghijklmnop"),
		// The audit chains (issue 30).
		s.Audit("runner.UABC"),
		// An agent's own subjects (issue 26).
		s.ForAgent("a1").ToolsList(), s.ForAgent("a1").Call("srv", "tool"), s.ForAgent("a1").RPC("srv"), s.ForAgent("a1").Cancel("srv"),
		s.ForAgent("a1").Event("call", "srv"),
		// Durable tasks (issue 31).
		s.Task("create"), s.Task("get"), s.Task("result"), s.Task("cancel"), s.Task("list"), s.TaskRun("srv"),
		s.Event("task", "0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e"),
		// OAuth access tokens revoked at the gateways.
		s.Service("tokens", "revoke"),
		// Tool pinning: review, approval and their events.
		s.ToolsReview(), s.ToolsApprove(), s.Event("tool_changed", "srv"), s.Event("tool_reviewed", "srv"),
		// The gateway's API keys (micro service mcpbus-gateway).
		s.Service("keys", "create"), s.Service("keys", "list"), s.Service("keys", "revoke"),
		// mcpbus up's agent identities (micro service mcpbus-agents) and the runners' record of them.
		s.Service("agents", "create"), s.Service("agents", "list"), s.Service("agents", "revoke"),
		"$KV." + bus.BucketAgents + ".a1",
	} {
		if r.channelFor(subject) == "" {
			t.Errorf("no channel of %s matches subject %s", asyncAPIFile, subject)
		}
	}
	for service, verbs := range controlVerbs() {
		for _, verb := range verbs {
			if subject := s.Service(service, verb); r.channelFor(subject) == "" {
				t.Errorf("no channel of %s matches subject %s", asyncAPIFile, subject)
			}
		}
	}
	// The progress channel is the one named by the header.
	foundProgress := false
	for _, ch := range channels {
		d, _ := lookup(ch, "description").(string)
		if lookup(ch, "address") == nil && strings.Contains(d, bus.HeaderProgressSubject) {
			foundProgress = true
		}
	}
	if !foundProgress {
		t.Errorf("no channel without address describes the %s header", bus.HeaderProgressSubject)
	}
	// The headers of the bus protocol.
	headerNames := map[string]bool{}
	for name := range r.asyncSchemas {
		var collect func(v any)
		collect = func(v any) {
			if props, ok := lookup(v, "properties").(map[string]any); ok {
				for k := range props {
					headerNames[k] = true
				}
			}
			if all, ok := lookup(v, "allOf").([]any); ok {
				for _, sub := range all {
					collect(sub)
				}
			}
		}
		collect(lookup(doc, "components", "schemas", name))
	}
	for _, h := range []string{"traceparent", "tracestate", bus.HeaderRequestID, bus.HeaderTimeout,
		bus.HeaderProgressSubject, bus.HeaderErrorCode, bus.HeaderError} {
		if !headerNames[h] {
			t.Errorf("%s does not describe the header %s", asyncAPIFile, h)
		}
	}
}
