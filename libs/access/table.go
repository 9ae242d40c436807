// Package access is who may do what on the bus: one identity per role, and
// the one table of each role's publish and subscribe permissions, from which
// both the embedded server of `mcpbus up` and the NATS configuration of a
// deployment are made. Least privilege: only runners subscribe to calls and
// resolve credentials, only the credential service serves mcp.v1.cred.*,
// only the operator (and the gateway acting for admin keys) manages configs,
// keys and runtimes; agents may call tools and read events, nothing else.
package access

import (
	"fmt"
	"slices"
	"strings"
)

// Role is a kind of identity on the bus.
type Role string

// The roles. Services have one identity each; agents one per agent.
const (
	Runner     Role = "runner"
	Config     Role = "config"
	Credential Role = "credential"
	Registry   Role = "registry"
	Gateway    Role = "gateway"
	Chat       Role = "chat"
	Operator   Role = "operator"
	Agent      Role = "agent"
	// Host is the process that runs the embedded NATS server (mcpbus up):
	// it serves agents.* (the server's users are its to change).
	Host Role = "host"
)

// ServiceRoles are the roles with one identity each, made on first start.
var serviceRoles = []Role{Runner, Config, Credential, Registry, Gateway, Chat, Operator, Host}

// ServiceRoles lists the roles of services and the operator.
func ServiceRoles() []Role { return slices.Clone(serviceRoles) }

// RoleOf maps a service name (mcpbus serve <name>) to its role.
func RoleOf(service string) (Role, error) {
	for _, r := range serviceRoles {
		if string(r) == service {
			return r, nil
		}
	}
	return "", fmt.Errorf("no bus role for service %q", service)
}

// InboxRoot starts every identity's private reply prefix.
const InboxRoot = "_I"

// Inbox is the private reply prefix of an identity: replies to its requests
// arrive under it, and only it may subscribe there.
func Inbox(name string) string { return InboxRoot + "." + name }

// Perms are the permissions of one identity: what it may publish and
// subscribe to. Responders also may publish to the reply subject of a
// request they received (allow_responses).
type Perms struct {
	Publish        []string
	Subscribe      []string
	AllowResponses bool
}

// Rule is one row of the table: a role and what it may do, with subjects
// written with {p} for the subject prefix and {inbox} for the identity's
// own reply prefix.
type Rule struct {
	Role      Role
	Publish   []string
	Subscribe []string
	// Why says what the role needs it for (shown in the rendered config).
	Why string
}

// Shared parts of the rules.
var (
	// Every micro service answers discovery ($SRV.PING|INFO|STATS).
	discovery = []string{"$SRV.>"}
	// JetStream: the API, KV puts, flow control and acks of consumers.
	jetstream = []string{"$JS.API.>", "$JS.FC.>", "$JS.ACK.>", "$KV.>"}
	ownInbox  = []string{"{inbox}.>"}
)

func join(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// Table is the permission table: the single source of every identity's
// permissions.
func Table() []Rule {
	return []Rule{
		{Role: Runner, Why: "serves calls, rpc, runtime and tools.list; resolves credentials; publishes status, catalogs and events; sends progress to callers' inboxes",
			Subscribe: join(ownInbox, discovery, []string{"{p}.call.>", "{p}.rpc.*", "{p}.control.*", "{p}.cancel.*", "{p}.tools.list", "{p}.runtime.*"}),
			Publish:   join(jetstream, []string{"{p}.events.>", "{p}.control.*", "{p}.cred.resolve", InboxRoot + ".>"})},
		{Role: Config, Why: "serves config.*; stores secrets through the credential service; starts servers through runtime.*",
			Subscribe: join(ownInbox, discovery, []string{"{p}.config.*"}),
			Publish:   join(jetstream, []string{"{p}.events.config.>", "{p}.cred.set", "{p}.cred.delete", "{p}.cred.describe", "{p}.cred.key", "{p}.runtime.*", "$SRV.>"})},
		{Role: Credential, Why: "serves cred.* (the only one that may); publishes an audit event of every resolve",
			Subscribe: join(ownInbox, discovery, []string{"{p}.cred.*"}),
			Publish:   join(jetstream, []string{"{p}.events.cred.>"})},
		{Role: Registry, Why: "serves registry.*; reads the stored Smithery key (cred.registry, never cred.resolve)",
			Subscribe: join(ownInbox, discovery, []string{"{p}.registry.*"}),
			Publish:   join(jetstream, []string{"{p}.cred.registry"})},
		{Role: Gateway, Why: "the HTTP edge: calls tools and, for admin keys, the control plane; serves keys.*",
			Subscribe: join(ownInbox, discovery, []string{"{p}.keys.*", "{p}.events.>"}),
			Publish: join(jetstream, []string{"{p}.call.>", "{p}.rpc.*", "{p}.cancel.*", "{p}.tools.list", "{p}.runtime.*",
				"{p}.config.*", "{p}.cred.set", "{p}.cred.delete", "{p}.cred.describe", "{p}.cred.key", "{p}.registry.*", "$SRV.>"})},
		{Role: Chat, Why: "the agent loop: calls tools, keeps conversations in JetStream",
			Subscribe: join(ownInbox, discovery, []string{"{p}.chat.>"}),
			Publish:   join(jetstream, []string{"{p}.call.>", "{p}.rpc.*", "{p}.cancel.*", "{p}.tools.list", "{p}.events.chat.>"})},
		{Role: Operator, Why: "the mcpbus CLI: the whole control plane and calls, never cred.resolve",
			Subscribe: join(ownInbox, []string{"{p}.events.>"}),
			Publish: join(jetstream, []string{"{p}.call.>", "{p}.rpc.*", "{p}.cancel.*", "{p}.tools.list", "{p}.runtime.*",
				"{p}.config.*", "{p}.cred.set", "{p}.cred.delete", "{p}.cred.describe", "{p}.cred.key", "{p}.registry.*", "{p}.keys.*", "{p}.agents.*", "$SRV.>"})},
		{Role: Host, Why: "mcpbus up: owns the embedded server's users, serves agents.*",
			Subscribe: join(ownInbox, discovery, []string{"{p}.agents.*"}),
			Publish:   join(jetstream)},
		{Role: Agent, Why: "an agent: calls the tools it is allowed, lists tools, reads events",
			Subscribe: join(ownInbox, []string{"{p}.events.>"}),
			Publish: []string{"{p}.tools.list", "{p}.cancel.*",
				"$JS.API.CONSUMER.CREATE.MCP_EVENTS.>", "$JS.API.CONSUMER.DELETE.MCP_EVENTS.>", "$JS.API.CONSUMER.MSG.NEXT.MCP_EVENTS.>",
				"$JS.API.STREAM.INFO.MCP_EVENTS", "$JS.API.INFO", "$JS.FC.>"}},
	}
}

// ruleOf is role's row of the table.
func ruleOf(role Role) (Rule, error) {
	for _, r := range Table() {
		if r.Role == role {
			return r, nil
		}
	}
	return Rule{}, fmt.Errorf("no rule for role %q", role)
}

// For is the permissions of one identity: role's row with the prefix and
// the identity's inbox filled in. extraPublish adds subjects (an agent's
// allowed call subjects).
func For(role Role, prefix, inbox string, extraPublish ...string) (Perms, error) {
	r, err := ruleOf(role)
	if err != nil {
		return Perms{}, err
	}
	fill := func(subjects []string) []string {
		out := make([]string, 0, len(subjects))
		for _, s := range subjects {
			s = strings.ReplaceAll(s, "{p}", prefix)
			out = append(out, strings.ReplaceAll(s, "{inbox}", inbox))
		}
		return out
	}
	return Perms{Publish: append(fill(r.Publish), extraPublish...), Subscribe: fill(r.Subscribe), AllowResponses: true}, nil
}

// AgentSubjects are the call and rpc subjects an agent allowed the tools
// matching allow (globs on <server>__<tool>) may request: a glob with an
// exact server part gives that server's subjects (all of its tools for
// "<server>__*", one tool otherwise); any other glob, every server's.
func AgentSubjects(prefix string, allow []string) []string {
	var out []string
	add := func(s ...string) {
		for _, v := range s {
			if !slices.Contains(out, v) {
				out = append(out, v)
			}
		}
	}
	for _, g := range allow {
		server, tool, ok := strings.Cut(g, "__")
		switch {
		case !ok || strings.ContainsAny(server, "*?[") || server == "":
			add(prefix+".call.>", prefix+".rpc.*")
		case tool == "*" || strings.ContainsAny(tool, "*?["):
			add(prefix+".call."+server+".*", prefix+".rpc."+server)
		default:
			add(prefix+".call."+server+"."+tool, prefix+".rpc."+server)
		}
	}
	return out
}
