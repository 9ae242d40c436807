package schema

import (
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/access"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// agentsService is the micro service of mcpbus up that answers
// mcp.v1.agents.* (tools/mcpbus/stack; TestRealMessages pings it by name).
const agentsService = "mcpbus-agents"

// TestAgentsModelMatchesSchemas: the agent messages (libs/model/agents.go),
// as they marshal, match their schemas, and each schema rejects an unknown
// member. TestRealMessages checks what mcpbus up really sends; this covers
// every member (max_inflight, an empty list) and the runners' record.
func TestAgentsModelMatchesSchemas(t *testing.T) {
	r := loadRegistry(t)
	at := time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)
	const prefix = "mcp.v1"
	allow := []string{"github__*", "everything__echo"}
	full := model.Agent{Name: "ci-bot_1", Allow: allow, Created: at, SeedFile: "/var/lib/mcpbus/identities/agent-ci-bot_1.nk",
		InboxPrefix: access.Inbox(access.AgentIdentity("ci-bot_1")), MaxInflight: 3,
		SubjectPrefix: bus.NewSubjects(prefix).ForAgent("ci-bot_1").Prefix, Subjects: access.AgentSubjects(prefix, "ci-bot_1", allow)}
	every := model.Agent{Name: "all", Allow: []string{"*"}, Created: at, SeedFile: "/tmp/agent-all.nk",
		InboxPrefix: access.Inbox(access.AgentIdentity("all")), SubjectPrefix: bus.NewSubjects(prefix).ForAgent("all").Prefix,
		Subjects: access.AgentSubjects(prefix, "all", []string{"*"})}
	docs := []modelDoc{
		{"agent-create-request", model.AgentCreateRequest{Name: "ci"}},
		{"agent-create-request", model.AgentCreateRequest{Name: "ci-bot_1", Allow: allow, MaxInflight: 3}},
		{"agent", full},
		{"agent", every},
		{"agent-list-request", struct{}{}},
		{"agent-list-reply", model.AgentList{Agents: []model.Agent{every, full}}},
		{"agent-list-reply", model.AgentList{}},
		{"agent-ref", model.AgentRef{Name: "ci-bot_1"}},
		{"agent-record", model.AgentRecord{Name: "ci-bot_1", Allow: allow, MaxInflight: 3}},
		{"agent-record", model.AgentRecord{Name: "all", Allow: []string{"*"}}},
	}
	checkModelDocs(t, r, docs)
	// The name rule of the schemas is the Go one (model.ValidateAgentName).
	for _, name := range []string{"a", "ci-bot_1", "UPPER", "with space", "a.b", "", "é",
		"abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwx", "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxy"} {
		goOK := model.ValidateAgentName(name) == nil
		if err := r.validate("agent-ref", mustJSON(t, model.AgentRef{Name: name})); (err == nil) != goOK {
			t.Errorf("agent-ref says %q valid=%v, model.ValidateAgentName %v: %v", name, err == nil, goOK, err)
		}
	}
}
