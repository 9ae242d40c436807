package stack

import (
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/access"
	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

// A revoked agent whose leftovers could not be removed (the credential
// service did not answer) keeps its name from a new agent, across a restart
// too (the mark in the identity directory), until a purge succeeds: revoking
// the name again retries it, and then the name is free.
func TestUnpurgedAgentNameIsNotGivenAgain(t *testing.T) {
	ns := testkit.NATS(t)
	nc := testkit.Connect(t, ns)
	ids, err := access.OpenStore(filepath.Join(t.TempDir(), "nats"))
	if err != nil {
		t.Fatal(err)
	}
	open := func() *Stack {
		s := &Stack{Identities: ids, agents: map[string]agent{}, unpurged: map[string]bool{}, hostNC: nc,
			prefix: bus.NewSubjects("").Prefix, log: slog.New(slog.DiscardHandler)}
		if err := s.loadAgents(); err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	// As RevokeAgent leaves it when the purge fails.
	s.unpurged["twin"] = true
	if err := os.WriteFile(s.purgeFile("twin"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeAgent("twin"); apierr.Of(err) != apierr.ServiceUnavailable {
		t.Fatalf("revoking again without a credential service: %v, want SERVICE_UNAVAILABLE", err)
	}
	s = open() // a restart
	if _, err := s.CreateAgent(model.AgentCreateRequest{Name: "twin"}); apierr.Of(err) != apierr.Conflict {
		t.Fatalf("creating the name of an unpurged agent: %v, want CONFLICT", err)
	}
	if _, err := os.Stat(s.Identities.SeedFile(access.AgentIdentity("twin"))); !os.IsNotExist(err) {
		t.Fatalf("a refused create made a seed: %v", err)
	}

	var mu sync.Mutex
	var asked []string
	sub, err := nc.Subscribe("mcp.v1.cred.forget", func(m *nats.Msg) {
		var in model.CredForgetRequest
		_ = bus.Decode(m.Data, &in)
		mu.Lock()
		asked = append(asked, in.Principal)
		mu.Unlock()
		_ = m.Respond([]byte(`{"principal":"` + in.Principal + `","removed":1}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := s.RevokeAgent("twin"); err != nil {
		t.Fatalf("revoking again with the credential service back: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 1 || asked[0] != "agent:twin" {
		t.Fatalf("cred.forget asked for %v, want agent:twin", asked)
	}
	if _, err := os.Stat(s.purgeFile("twin")); !os.IsNotExist(err) {
		t.Fatalf("the mark stays after the purge: %v", err)
	}
	if s = open(); s.unpurged["twin"] {
		t.Fatal("the name is still held after a restart")
	}
	if err := s.RevokeAgent("twin"); apierr.Of(err) != apierr.NotFound {
		t.Fatalf("revoking a purged name: %v, want NOT_FOUND", err)
	}
}
