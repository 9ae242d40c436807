// Package access is who may do what on the bus: one identity per role, and
// the one table of each role's publish and subscribe permissions, from which
// both the embedded server of `mcpbus up` and the NATS configuration of a
// deployment are made. Least privilege: only runners subscribe to calls and
// resolve credentials, only the credential service serves mcp.v1.cred.*,
// only the operator (and the gateway acting for admin keys) manages configs,
// agent identities and runtimes, only the operator requests keys.* (the
// gateway serves it); agents may call tools and read events, nothing else.
package access

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
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
// subscribe to. No identity has NATS allow_responses: with it a responder
// may publish once to any request's reply subject, whatever its allow list
// says, so a caller could aim a service's reply at a stream's API or a KV
// key. Responders publish into inboxes (_I.>) instead, and refuse a request
// whose reply is not one (bus.RefuseReply).
type Perms struct {
	Publish   []string
	Subscribe []string
	// DenyPublish wins over Publish (auditDeny: every identity's).
	DenyPublish []string
}

// MayPublish reports whether p lets its identity publish subject, as the
// NATS server decides it: some Publish subject matches and no DenyPublish one.
func (p Perms) MayPublish(subject string) bool {
	match := func(filters []string) bool {
		return slices.ContainsFunc(filters, func(f string) bool { return server.SubjectMatchesFilter(subject, f) })
	}
	return match(p.Publish) && !match(p.DenyPublish)
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
	ownInbox  = []string{"{inbox}.>"}
	// replies: services answer requests into the callers' inboxes.
	replies = []string{InboxRoot + ".>"}
)

// The queue groups a runner serves in: one per server (bus.QueueGroup) and
// the runners' own (tools.list, runtime.*). A runner may subscribe to calls
// only in them, so no runner sees a call another one answers.
const (
	serverQueues = "mcp.*"
	runnerQueue  = "mcpbus-runner"
)

// JetStream is granted per stream, never as $JS.API.>: with the whole API
// one identity could read or rewrite every bucket (API keys, configs,
// leases), capture anyone's replies into a stream of its own, or delete
// the audit trail.

// ensure may create, update and inspect the named streams (creating a KV
// bucket reads the account's JetStream limits: $JS.API.INFO).
func ensure(streams ...string) []string {
	out := []string{"$JS.API.INFO"}
	for _, s := range streams {
		out = append(out, "$JS.API.STREAM.CREATE."+s, "$JS.API.STREAM.UPDATE."+s, "$JS.API.STREAM.INFO."+s)
	}
	return out
}

// consume may read the named streams: direct gets, and consumers (watches,
// key lists, ordered replays) with their flow control and acks.
func consume(streams ...string) []string {
	var out []string
	for _, s := range streams {
		out = append(out, "$JS.API.INFO", "$JS.API.STREAM.INFO."+s, "$JS.API.STREAM.MSG.GET."+s, "$JS.API.DIRECT.GET."+s+".>",
			"$JS.API.CONSUMER.CREATE."+s, "$JS.API.CONSUMER.CREATE."+s+".>", "$JS.API.CONSUMER.DELETE."+s+".>",
			"$JS.API.CONSUMER.INFO."+s+".>", "$JS.API.CONSUMER.MSG.NEXT."+s+".>", "$JS.FC."+s+".>", "$JS.ACK."+s+".>")
	}
	return out
}

// kvRead reads buckets; kvWrite reads and writes them.
func kvRead(buckets ...string) []string {
	var out []string
	for _, b := range buckets {
		out = append(out, consume("KV_"+b)...)
	}
	return out
}

func kvWrite(buckets ...string) []string {
	out := kvRead(buckets...)
	for _, b := range buckets {
		out = append(out, "$KV."+b+".>")
	}
	return out
}

// The JetStream assets (libs/bus/subjects.go and the services' own buckets).
const (
	streamEvents = "MCP_EVENTS"
	streamAudit  = "MCP_AUDIT"
	bConfigs     = "mcp_configs"
	bStatus      = "mcp_status"
	bTools       = "mcp_tools"
	bSlugs       = "mcp_slugs"
	bOwners      = "mcp_owners"
	bAPIKeys     = "mcp_apikeys"
	bOAuthFlows  = "mcp_oauth_flows"
	bRevocations = "mcp_token_revocations"
	bRegistry    = "mcp_registry_cache"
	bAgents      = "mcp_agents"
	bPins        = "mcp_pins"
	// The durable tasks (the runners'): runs waiting for an owner, records.
	streamTasks = "MCP_TASKS"
	bTasks      = "mcp_tasks"
	// The approvals (gateway, chat, runners): the rules and the calls they hold.
	bApprovalRules = "mcp_approval_rules"
	bApprovals     = "mcp_approvals"
	// The chat service's own assets.
	streamChat     = "MCP_CHAT"
	bChatProfiles  = "mcp_chat_profiles"
	bChatApprovals = "mcp_chat_approvals"
	bChatTurns     = "mcp_chat_turns"
	oChatResults   = "mcp_chat_results"
)

// purge may purge the named streams (a conversation's log, an object's chunks).
func purge(streams ...string) []string {
	var out []string
	for _, s := range streams {
		out = append(out, "$JS.API.STREAM.PURGE."+s)
	}
	return out
}

// objWrite reads and writes object stores (stream OBJ_<bucket>: chunks and
// metadata subjects, purged when an object is replaced or deleted).
func objWrite(buckets ...string) []string {
	var out []string
	for _, b := range buckets {
		out = append(out, consume("OBJ_"+b)...)
		out = append(out, purge("OBJ_"+b)...)
		out = append(out, "$O."+b+".>")
	}
	return out
}

// sharedAssets are what bus.EnsureAssets creates (config, runner, gateway);
// the audit stream is created, never updated.
var sharedAssets = join(ensure(streamEvents, "KV_"+bConfigs, "KV_"+bStatus, "KV_"+bTools, "KV_"+bSlugs, "KV_"+bOwners, "KV_"+bAgents, "KV_"+bPins),
	[]string{"$JS.API.STREAM.CREATE." + streamAudit, "$JS.API.STREAM.INFO." + streamAudit})

// auditWrite appends to the identity's own audit chain
// (<p>.audit.<role>.<its public key>, libs/audit) and reads its head,
// nobody else's. {key} is the identity's key where it is known (User,
// Render with keys); else "*", every chain of the role. Were it always
// "*", one compromised runner could store junk as another runner's head,
// which stopped that runner's chain, and read its last events.
func auditWrite(role Role) []string {
	chains := "{p}.audit." + string(role) + ".{key}"
	return []string{chains, "$JS.API.DIRECT.GET." + streamAudit + "." + chains}
}

// auditDeny is denied to every identity, whatever its allow list says: the
// audit stream is append-only (the stream's DenyDelete and DenyPurge too).
var auditDeny = []string{"$JS.API.STREAM.PURGE." + streamAudit, "$JS.API.STREAM.MSG.DELETE." + streamAudit,
	"$JS.API.STREAM.DELETE." + streamAudit, "$JS.API.STREAM.UPDATE." + streamAudit}

// AuditDeny lists what no identity may publish (auditDeny).
func AuditDeny() []string { return slices.Clone(auditDeny) }

func join(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		for _, s := range p {
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out
}

// Table is the permission table: the single source of every identity's
// permissions.
func Table() []Rule {
	return []Rule{
		{Role: Runner, Why: "serves calls, rpc, runtime (start, stop and restart reach every replica of a server: control.<server>.all, runners only), tools.list, tools.search, tools.review/approve and task.*; resolves credentials; publishes status, catalogs, leases, tool pins and call, tool_changed, tool_reviewed, task, resource_updated and list_changed events; queues and consumes task runs (MCP_TASKS, and drops the run of a task that ended before any run started it) and keeps task records (mcp_tasks); cancels a task's call on cancel.*; reads the fingerprints of every stored secret (cred.fingerprints, the only one that may) again when a record changes (events.cred.*); appends call, tool_changed and tool_reviewed events to its audit chains; sends progress to callers' inboxes; applies the approval rules to every call (reads mcp_approval_rules, holds and consumes calls in mcp_approvals)",
			Subscribe: join(ownInbox, discovery, []string{"{p}.call.> " + serverQueues, "{p}.rpc.* " + serverQueues, "{p}.control.* " + serverQueues, "{p}.control.*.all",
				"{p}.agent.*.call.> " + serverQueues, "{p}.agent.*.rpc.* " + serverQueues, "{p}.cancel.*", "{p}.agent.*.cancel.*",
				"{p}.tools.list " + runnerQueue, "{p}.agent.*.tools.list " + runnerQueue,
				"{p}.tools.search " + runnerQueue, "{p}.agent.*.tools.search " + runnerQueue, "{p}.runtime.* " + runnerQueue,
				"{p}.tools.review " + runnerQueue, "{p}.tools.approve " + runnerQueue, "{p}.task.* " + runnerQueue, "{p}.events.cred.*"}),
			Publish: join(sharedAssets, ensure(streamTasks, "KV_"+bTasks), kvRead(bConfigs, bAgents), kvWrite(bStatus, bTools, bOwners, bPins, bTasks), consume(streamTasks), []string{"$JS.API.STREAM.MSG.DELETE." + streamTasks}, auditWrite(Runner),
				ensure("KV_"+bApprovalRules, "KV_"+bApprovals), kvRead(bApprovalRules), kvWrite(bApprovals),
				[]string{"{p}.events.status.>", "{p}.events.call.>", "{p}.agent.*.events.call.*", "{p}.agent.*.events.status.*", "{p}.events.tool_changed.>", "{p}.events.tool_reviewed.>", "{p}.events.task.>",
					"{p}.events.resource_updated.*", "{p}.events.list_changed.*", "{p}.tasks.run.*", "{p}.cancel.*", "{p}.control.*", "{p}.control.*.all", "{p}.cred.resolve", "{p}.cred.fingerprints", InboxRoot + ".>"})},
		{Role: Config, Why: "serves config.*; keeps configs and slugs (and drops a deleted server's status and catalog); stores secrets through the credential service; starts servers through runtime.*; appends config events to its audit chains",
			Subscribe: join(ownInbox, discovery, []string{"{p}.config.*"}),
			Publish: join(sharedAssets, kvWrite(bConfigs, bSlugs, bStatus, bTools), kvRead(bOwners), auditWrite(Config),
				replies, []string{"{p}.events.config.>", "{p}.cred.set", "{p}.cred.delete", "{p}.cred.describe", "{p}.cred.key", "{p}.runtime.*", "$SRV.>"})},
		{Role: Credential, Why: "serves cred.* (the only one that may); reads configs and leases to answer resolve only to a server's owner; publishes an audit event of every resolve (and registry, chatkey answer) and of every change of a record, appended to its audit chains",
			Subscribe: join(ownInbox, discovery, []string{"{p}.cred.*"}),
			Publish:   join(kvRead(bConfigs, bOwners), replies, auditWrite(Credential), []string{"{p}.events.cred.>"})},
		{Role: Registry, Why: "serves registry.*; caches registry answers; reads the stored Smithery key (cred.registry, never cred.resolve)",
			Subscribe: join(ownInbox, discovery, []string{"{p}.registry.*"}),
			Publish:   join(ensure("KV_"+bRegistry), kvWrite(bRegistry), replies, []string{"{p}.cred.registry"})},
		{Role: Gateway, Why: "the HTTP edge: calls tools, runs them as durable tasks (task.*) and, for admin keys, the control plane and agents.* (the console's agent identities, served by mcpbus up); chat for chat keys; keeps API keys and the OAuth access-token revocation list; serves keys.*, tokens.* and oauth.* (the OAuth flows of remote servers, whose tokens it hands to the credential service through config.update and whose outcome it publishes); passes a flow's callback to the instance holding it (oauth.callback.<flow>, sealed; KV mcp_oauth_flows), gateways only; reads a confidential OAuth client's secret and the client it registered dynamically on cred.oauthclient (never cred.resolve), and keeps that client in the server's OAuth client record (cred.set, kind oauth_client); gateway.retry.* between its instances (the multi round-trip retries of a call another instance holds); keeps the approval rules and the calls they hold (KV mcp_approval_rules, mcp_approvals) and serves approvals.*; publishes events.gateway.* (keys, token revocations, authorization flows, approval decisions) and appends them and its events.oauth.* to its audit chains; reads the audit stream to verify it for admins (GET /api/v1/audit/verify); reads the runners' leases (mcp_owners) to end a call whose runner died",
			Subscribe: join(ownInbox, discovery, []string{"{p}.keys.*", "{p}.tokens.*", "{p}.oauth.*", "{p}.oauth.callback.*", "{p}.events.>", "{p}.gateway.retry.*", "{p}.approvals.*"}),
			Publish: join(sharedAssets, ensure("KV_"+bAPIKeys, "KV_"+bOAuthFlows, "KV_"+bRevocations, "KV_"+bApprovalRules, "KV_"+bApprovals), kvWrite(bAPIKeys, bOAuthFlows, bRevocations, bApprovalRules, bApprovals), kvRead(bTools, bStatus, bOwners), consume(streamEvents), consume(streamAudit), auditWrite(Gateway), replies,
				[]string{"{p}.call.>", "{p}.rpc.*", "{p}.cancel.*", "{p}.tools.list", "{p}.tools.review", "{p}.tools.approve", "{p}.runtime.*", "{p}.task.*",
					"{p}.config.*", "{p}.cred.set", "{p}.cred.delete", "{p}.cred.describe", "{p}.cred.key", "{p}.registry.*", "{p}.agents.*", "{p}.chat.*", "{p}.chat.profiles.*",
					"{p}.cred.oauthclient", "{p}.oauth.callback.*", "{p}.events.oauth.>", "{p}.events.gateway.>", "{p}.gateway.retry.*", "$SRV.>"})},
		{Role: Chat, Why: "the agent loop: serves chat.*; calls tools (the long ones as durable tasks, task.*), reads events; keeps its conversation logs (MCP_CHAT), profiles, pending approvals and large results; holds the calls its profiles' rules ask about in mcp_approvals (reads mcp_approval_rules); stores profile API keys through the credential service (cred.chatset, chatdelete, chatdescribe: chat profiles' keys only, never a server's secrets) and reads them back on cred.chatkey (never cred.resolve); appends its chat audit events to its audit chains; reads the runners' leases (mcp_owners) to end a call whose runner died",
			Subscribe: join(ownInbox, discovery, []string{"{p}.chat.*", "{p}.chat.profiles.*"}),
			Publish: join(consume(streamEvents), ensure(streamChat, "KV_"+bChatProfiles, "KV_"+bChatApprovals, "KV_"+bChatTurns, "OBJ_"+oChatResults),
				consume(streamChat), purge(streamChat), replies, auditWrite(Chat), []string{"{p}.chat.log.>"}, kvWrite(bChatProfiles, bChatApprovals, bChatTurns), objWrite(oChatResults),
				ensure("KV_"+bApprovalRules, "KV_"+bApprovals), kvRead(bApprovalRules, bOwners), kvWrite(bApprovals),
				[]string{"{p}.call.>", "{p}.rpc.*", "{p}.cancel.*", "{p}.task.*", "{p}.tools.list", "{p}.events.chat.>",
					"{p}.cred.chatset", "{p}.cred.chatdelete", "{p}.cred.chatdescribe", "{p}.cred.key", "{p}.cred.chatkey"})},
		{Role: Operator, Why: "the mcpbus CLI: the whole control plane, calls and tasks, chat and its profiles, the gateway's approvals, event replay and the catalog (serve-stdio) and its search, reading the audit stream (audit verify, export), never cred.resolve",
			Subscribe: join(ownInbox, []string{"{p}.events.>"}),
			Publish: join(consume(streamEvents), consume(streamAudit), kvRead(bTools, bStatus), replies, []string{"{p}.call.>", "{p}.rpc.*", "{p}.cancel.*", "{p}.task.*", "{p}.tools.list", "{p}.tools.search", "{p}.tools.review", "{p}.tools.approve", "{p}.runtime.*",
				"{p}.config.*", "{p}.cred.set", "{p}.cred.delete", "{p}.cred.describe", "{p}.cred.key", "{p}.registry.*", "{p}.keys.*", "{p}.tokens.*", "{p}.oauth.*", "{p}.agents.*",
				"{p}.chat.*", "{p}.chat.profiles.*", "{p}.approvals.*", "$SRV.>"})},
		{Role: Host, Why: "mcpbus up: owns the embedded server's users, serves agents.*; keeps the agents' records (KV mcp_agents) the runners check calls against; on an agent's revocation deletes its own upstream credentials (cred.forget, the only one that may) and withdraws its held calls (mcp_approvals), so the next agent of the name inherits neither",
			Subscribe: join(ownInbox, discovery, []string{"{p}.agents.*"}),
			Publish:   join(replies, ensure("KV_"+bAgents), kvWrite(bAgents, bApprovals), []string{"{p}.cred.forget"})},
		{Role: Agent, Why: "an agent: requests only under its own {p}.agent.<name> (AgentPerms: calls, rpc and cancels of the servers its globs name, tools.list, tools.search), so the subject names the caller; follows the live status events of those servers, naming only its tools ({p}.agent.<name>.events.status.<server>), and the call events of its own calls ({p}.agent.<name>.events.call.<server>); no JetStream, no replies",
			Subscribe: ownInbox},
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
// Its audit chain is any of the role's (auditWrite): ForIdentity names the
// identity's own.
func For(role Role, prefix, inbox string, extraPublish ...string) (Perms, error) {
	return perms(role, prefix, inbox, "*", extraPublish)
}

// ForIdentity is For of id's role and inbox, its audit chain the one of
// its public key (when id.Public is a key, not a $VARIABLE reference).
func ForIdentity(id Identity, prefix string, extraPublish ...string) (Perms, error) {
	key := "*"
	if nkeys.IsValidPublicUserKey(id.Public) {
		key = id.Public
	}
	return perms(id.Role, prefix, id.Inbox(), key, extraPublish)
}

func perms(role Role, prefix, inbox, key string, extraPublish []string) (Perms, error) {
	r, err := ruleOf(role)
	if err != nil {
		return Perms{}, err
	}
	fill := func(subjects []string) []string {
		out := make([]string, 0, len(subjects))
		for _, s := range subjects {
			s = strings.ReplaceAll(s, "{p}", prefix)
			s = strings.ReplaceAll(s, "{key}", key)
			out = append(out, strings.ReplaceAll(s, "{inbox}", inbox))
		}
		return out
	}
	return Perms{Publish: append(fill(r.Publish), extraPublish...), Subscribe: fill(r.Subscribe), DenyPublish: AuditDeny()}, nil
}

// AgentPerms are the permissions of agent name allowed the tools matching
// allow (globs on <server>__<tool>): its row of the table, and requests
// under its own prefix <prefix>.agent.<name> only. A glob with an exact
// server part gives that server's subjects (all of its tools for
// "<server>__*", one tool otherwise) and its live status events; any other
// glob, every server's. It follows events under its own prefix only: of its
// own calls (<prefix>.agent.<name>.events.call.<server>), as a server's call
// events name every caller and carry their error texts; and its servers'
// status (<prefix>.agent.<name>.events.status.<server>), naming only the
// tools it may call, as a server's status names all of its tools. The runner checks each call against the
// globs themselves (KV mcp_agents), so a glob like "everything__ech*" means
// exactly the tools it matches.
func AgentPerms(prefix, name string, allow []string) (Perms, error) {
	p, err := For(Agent, prefix, Inbox(AgentIdentity(name)))
	if err != nil {
		return Perms{}, err
	}
	own := prefix + ".agent." + name
	// Its answers to what a server asks during its calls (elicitation,
	// sampling) go to the runner's answers inbox (bus.RequestAnswer), the
	// only part of another identity's inbox it may write to.
	pub := []string{own + ".tools.list", own + ".tools.search", InboxRoot + ".*." + bus.AnswersToken + ".>"}
	sub := []string{own + ".events.call.*"}
	add := func(list *[]string, s ...string) {
		for _, v := range s {
			if !slices.Contains(*list, v) {
				*list = append(*list, v)
			}
		}
	}
	for _, g := range allow {
		server, tool, ok := strings.Cut(g, "__")
		switch {
		case !ok || strings.ContainsAny(server, "*?[") || server == "":
			add(&pub, own+".call.>", own+".rpc.*", own+".cancel.*")
			add(&sub, own+".events.status.*")
		case tool == "*" || strings.ContainsAny(tool, "*?["):
			add(&pub, own+".call."+server+".*", own+".rpc."+server, own+".cancel."+server)
			add(&sub, own+".events.status."+server)
		default:
			// A tool named as its server does ("files.remove") is called on
			// its subject token (files_remove_<hash>).
			add(&pub, own+".call."+server+"."+model.ToolToken(tool), own+".rpc."+server, own+".cancel."+server)
			add(&sub, own+".events.status."+server)
		}
	}
	p.Publish = append(p.Publish, pub...)
	p.Subscribe = append(p.Subscribe, sub...)
	return p, nil
}

// AgentSubjects are the subjects agent name may request (AgentPerms).
func AgentSubjects(prefix, name string, allow []string) []string {
	p, err := AgentPerms(prefix, name, allow)
	if err != nil {
		return nil
	}
	return p.Publish
}

// AgentIdentity is the bus identity (nkey file and inbox) of agent name.
func AgentIdentity(name string) string { return AgentIdentityPrefix + name }

// AgentIdentityPrefix starts every agent identity's name.
const AgentIdentityPrefix = "agent-"
