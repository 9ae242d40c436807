package schema

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/tools/mcpbus/stack"
)

// driveAgents drives mcp.v1.agents.{create,list,revoke} as the CLI does (the
// operator's identity), served by the stack itself (micro service
// mcpbus-agents): an agent with globs and max_inflight made, one with every
// tool made and kept (so KV mcp_agents holds a record at the end), both
// listed, the first revoked; a bad name refused (VALIDATION_ERROR, against
// the schema on purpose), a second agent of a name CONFLICT and an unknown
// name NOT_FOUND. It returns the kept agent's seed, which must never cross
// the bus (checkSeedNever).
func driveAgents(t *testing.T, ctx context.Context, sys *stack.Stack, subj bus.Subjects, bad deliberate) string {
	t.Helper()
	req := operatorRequests(t, ctx, sys, subj, "agents")
	var made model.Agent
	in := model.AgentCreateRequest{Name: "schema-agent", Allow: []string{"schema__echo", "schema__prog*"}, MaxInflight: 2}
	if err := req("create", in, &made); err != nil || made.Name != in.Name || made.MaxInflight != 2 || len(made.Subjects) == 0 {
		t.Fatalf("agents.create: %+v, %v", made, err)
	}
	var kept model.Agent
	if err := req("create", model.AgentCreateRequest{Name: "schema-all"}, &kept); err != nil || !slices.Equal(kept.Allow, []string{"*"}) {
		t.Fatalf("agents.create without globs: %+v, %v", kept, err)
	}
	wantCode(t, "agents.create of an existing agent", req("create", in, &made), apierr.Conflict)
	badName := model.AgentCreateRequest{Name: "Schema Agent!"}
	bad.add("agents.create", badName)
	wantCode(t, "agents.create with a bad name", req("create", badName, &made), apierr.Validation)

	var list model.AgentList
	if err := req("list", struct{}{}, &list); err != nil || len(list.Agents) != 2 {
		t.Fatalf("agents.list: %+v, %v", list, err)
	}
	var revoked model.AgentRef
	if err := req("revoke", model.AgentRef{Name: made.Name}, &revoked); err != nil || revoked.Name != made.Name {
		t.Fatalf("agents.revoke: %+v, %v", revoked, err)
	}
	wantCode(t, "agents.revoke of an unknown agent", req("revoke", model.AgentRef{Name: made.Name}, &revoked), apierr.NotFound)
	if err := req("list", struct{}{}, &list); err != nil || len(list.Agents) != 1 || list.Agents[0].Name != kept.Name {
		t.Fatalf("agents.list after the revocation: %+v, %v", list, err)
	}
	seed, err := os.ReadFile(kept.SeedFile)
	if err != nil || !strings.HasPrefix(string(seed), "SU") {
		t.Fatalf("the seed file of agent %s: %v", kept.Name, err)
	}
	return strings.TrimSpace(string(seed))
}

// checkSeedNever checks that an agent's seed crossed the bus in no message:
// agents.create names the file that holds it, never the seed.
func checkSeedNever(t *testing.T, msgs []captured, seed string) {
	t.Helper()
	for _, m := range msgs {
		if testkit.MsgContains(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data}, seed) {
			t.Errorf("an agent's seed crossed the bus in %s", m.Subject)
		}
	}
}
