package schema

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/access"
	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
	"github.com/mcpbus/mcpbus/tools/mcpbus/stack"
)

// operatorRequests returns a requester of service's verbs with the
// operator's identity, as the CLI makes them (its connection closes with t).
func operatorRequests(t *testing.T, ctx context.Context, sys *stack.Stack, subj bus.Subjects, service string) func(verb string, in, out any) error {
	t.Helper()
	nc, err := sys.ConnectAs("schema-operator", access.Operator)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return func(verb string, in, out any) error {
		return bus.RequestJSON(ctx, nc, subj.Service(service, verb), in, out, 10*time.Second)
	}
}

// driveKeys drives mcp.v1.keys.{create,list,revoke} as the CLI does (the
// operator's identity): a key with every member made, listed, revoked and
// listed again with the revoked ones; a key without a name refused
// (VALIDATION_ERROR) and an unknown id NOT_FOUND. It returns the key made,
// whose secret only the keys.create reply may carry (checkKeyOnce).
func driveKeys(t *testing.T, ctx context.Context, sys *stack.Stack, subj bus.Subjects, bad deliberate) string {
	t.Helper()
	req := operatorRequests(t, ctx, sys, subj, "keys")
	in := model.KeyCreateRequest{Name: "schema agent", Scopes: []string{model.KeyScopeCall, model.KeyScopeChat, model.KeyScopeCall},
		Tools: model.ToolFilter{Allow: []string{"schema__*"}, Deny: []string{"*__fail"}}, ToolsMode: model.KeyToolsModeSearch,
		PinnedTools: []string{"schema__echo"}, Rate: &model.KeyRate{RPS: 5, Burst: 10}}
	var made model.KeyCreateReply
	if err := req("create", in, &made); err != nil || made.Key == "" || !slices.Equal(made.Scopes, []string{model.KeyScopeCall, model.KeyScopeChat}) {
		t.Fatalf("keys.create: %+v, %v", made.APIKey, err)
	}
	if id, _, ok := auth.ParseKey(made.Key); !ok || id != made.ID {
		t.Fatalf("keys.create made a key the gateway does not parse (id %s)", made.ID)
	}
	bad.add("keys.create", model.KeyCreateRequest{})
	wantCode(t, "keys.create without a name", req("create", model.KeyCreateRequest{}, &made), apierr.Validation)

	var list model.KeyListReply
	if err := req("list", model.KeyListRequest{}, &list); err != nil || !slices.ContainsFunc(list.Keys, func(k model.APIKey) bool { return k.ID == made.ID }) {
		t.Fatalf("keys.list: %+v, %v", list, err)
	}
	var revoked model.APIKey
	if err := req("revoke", model.KeyRevokeRequest{ID: made.ID}, &revoked); err != nil || revoked.ID != made.ID || !revoked.Revoked() {
		t.Fatalf("keys.revoke: %+v, %v", revoked, err)
	}
	wantCode(t, "keys.revoke of an unknown key", req("revoke", model.KeyRevokeRequest{ID: "0123456789abcdef"}, &revoked), apierr.NotFound)
	if err := req("list", model.KeyListRequest{IncludeRevoked: true}, &list); err != nil ||
		!slices.ContainsFunc(list.Keys, func(k model.APIKey) bool { return k.ID == made.ID && k.Revoked() }) {
		t.Fatalf("keys.list with the revoked keys: %+v, %v", list, err)
	}
	return made.Key
}

// checkKeyOnce checks that the secret of a key made on keys.create crossed
// the bus once, in the reply that hands it over (key-create-reply.json):
// not in the gateway's KV record, its audit event and record, nor anywhere else.
func checkKeyOnce(t *testing.T, reg *registry, msgs []captured, key string) {
	t.Helper()
	_, secret, ok := auth.ParseKey(key)
	if !ok {
		t.Fatalf("not a key: %q", key)
	}
	var seen []string
	for _, m := range msgs {
		if testkit.MsgContains(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data}, secret) {
			seen = append(seen, m.Subject)
			if err := reg.validate("key-create-reply", m.Data); err != nil {
				t.Errorf("the key's secret crossed the bus in %s, which is not a keys.create reply: %v", m.Subject, err)
			}
		}
	}
	if len(seen) != 1 {
		t.Errorf("the key's secret crossed the bus %d times (%v), want once", len(seen), seen)
	}
}
