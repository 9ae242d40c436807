// Package bus holds the conventions every mcpbus service uses on NATS:
// subject names, headers, error replies, request helpers with timeouts and
// W3C trace-context propagation.
package bus

import "strings"

// DefaultPrefix is the subject prefix used unless one is configured.
const DefaultPrefix = "mcp.v1"

// Names of the JetStream assets shared by the services.
const (
	StreamEvents  = "MCP_EVENTS"
	BucketConfigs = "mcp_configs"
	BucketStatus  = "mcp_status"
	BucketTools   = "mcp_tools"
	BucketOwners  = "mcp_owners"
	BucketSlugs   = "mcp_slugs"
	// BucketAgents holds the agents' records (model.AgentRecord by name),
	// written by the host that makes agents and read by the runners.
	BucketAgents = "mcp_agents"
	// BucketPins holds the pinned tool definitions (model.ToolPin by
	// model.PinKey), written by the runners.
	BucketPins = "mcp_pins"
)

// StreamAudit holds the audit chains, subjects <prefix>.audit.<role>.<key>
// (libs/audit): append-only, no identity may purge, delete or update it.
const StreamAudit = "MCP_AUDIT"

// Names of the chat service's own JetStream assets.
const (
	// StreamChat holds the conversation logs, subjects <prefix>.chat.log.<conversation>.
	StreamChat = "MCP_CHAT"
	// BucketChatProfiles holds the chat profiles by name (never an API key).
	BucketChatProfiles = "mcp_chat_profiles"
	// BucketChatApprovals holds the tool calls awaiting approval.
	BucketChatApprovals = "mcp_chat_approvals"
	// BucketChatTurns holds the leases of running turns (one instance drives
	// a conversation at a time) and the cancellations asked of them.
	BucketChatTurns = "mcp_chat_turns"
	// ObjectChatResults is the object store of tool results too large for the context.
	ObjectChatResults = "mcp_chat_results"
)

// BucketOAuthFlows is the gateway's own bucket of the OAuth flows waiting
// for their callback (key: the SHA-256 of the flow's state), so that any
// gateway instance can pass a callback on to the one holding the flow.
const BucketOAuthFlows = "mcp_oauth_flows"

// Names of the durable tasks' assets (the runners'): the work-queue stream
// of task runs, subjects <prefix>.tasks.run.<server>, and the task records.
const (
	StreamTasks = "MCP_TASKS"
	BucketTasks = "mcp_tasks"
)

// The gateway's buckets of approvals for any MCP client: the rules (one key,
// "policy", model.ApprovalRules) and the calls they hold (held.<id>,
// model.HeldCall), shared by every gateway instance.
const (
	BucketApprovalRules = "mcp_approval_rules"
	BucketApprovals     = "mcp_approvals"
)

// Headers of the bus protocol.
const (
	// HeaderRequestID identifies one request end to end (logs, events, cancellation).
	HeaderRequestID = "Mcp-Request-Id"
	// MaxRequestID bounds HeaderRequestID, in bytes: the call event, which the
	// audit stream keeps (oldest dropped first past its size), carries it,
	// so a caller's long ids would push older records out.
	MaxRequestID = 256
	// HeaderProgressSubject asks the runner to publish the call's MCP progress
	// notifications to this subject (usually an inbox of the caller).
	HeaderProgressSubject = "Mcp-Progress-Subject"
	// HeaderClientSubject asks the runner to relay the MCP server's own
	// requests during the call (elicitation, sampling) to this subject as
	// NATS requests (model.ClientRequest), answered with the MCP result. Like
	// the progress subject it must be under the caller's own reply prefix.
	HeaderClientSubject = "Mcp-Client-Subject"
	// HeaderTimeout is how long the caller will wait, in milliseconds; the
	// runner never works on a call longer than that.
	HeaderTimeout = "Mcp-Timeout-Ms"
	// HeaderToolResult, on a tool call's reply, says the runner checked the
	// result is a CallToolResult (a JSON object with a content array) and
	// whether it is a tool error (ToolResultOK, ToolResultError): a caller
	// may pass the result on without decoding it. Absent: not checked.
	HeaderToolResult = "Mcp-Tool-Result"
	// HeaderTask, "true" on a tool call request, makes the call a durable
	// task: the reply is the task's handle (model.Task, state working), as
	// task.create would answer, and the call runs on the server's owner.
	HeaderTask = "Mcp-Task"
	// HeaderNotRun, "true" on an error reply to a tool call, says the call
	// did not reach the MCP server: the runner had let the server go (a
	// handover, a lapsed lease) and another runner may serve it now, so
	// the caller may send it again (ErrNotRun).
	HeaderNotRun = "Mcp-Not-Run"
	// HeaderErrorCode and HeaderError are the NATS micro error headers.
	HeaderErrorCode = "Nats-Service-Error-Code"
	HeaderError     = "Nats-Service-Error"
)

// Values of HeaderToolResult.
const (
	ToolResultOK    = "ok"
	ToolResultError = "error"
)

// Subjects builds the subjects under one prefix.
type Subjects struct{ Prefix string }

// NewSubjects returns the builder for prefix ("" means DefaultPrefix).
func NewSubjects(prefix string) Subjects {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return Subjects{Prefix: strings.TrimSuffix(prefix, ".")}
}

func (s Subjects) join(parts ...string) string {
	return s.Prefix + "." + strings.Join(parts, ".")
}

// Call is the subject of one tool of one server; tool is the subject-safe token.
func (s Subjects) Call(server, tool string) string { return s.join("call", server, tool) }

// CallAll matches every tool of server.
func (s Subjects) CallAll(server string) string { return s.join("call", server, "*") }

// ToolsList is the catalog request subject.
func (s Subjects) ToolsList() string { return s.join("tools", "list") }

// ToolsReview is where the runners list the tools whose definition changed
// since it was pinned; ToolsApprove where they approve or reject one.
func (s Subjects) ToolsReview() string  { return s.join("tools", "review") }
func (s Subjects) ToolsApprove() string { return s.join("tools", "approve") }

// ToolsSearch is the catalog search subject (BM25 over the tools).
func (s Subjects) ToolsSearch() string { return s.join("tools", "search") }

// RPC carries the other MCP methods (resources, prompts, completion, ping) of server.
func (s Subjects) RPC(server string) string { return s.join("rpc", server) }

// Cancel is where callers announce that they gave up on a request of server;
// every replica of the server listens (no queue group).
func (s Subjects) Cancel(server string) string { return s.join("cancel", server) }

// Control is the internal control subject of server, answered by one of its owners.
func (s Subjects) Control(server string) string { return s.join("control", server) }

// ControlAll is the internal control subject that every owner of server
// hears (no queue group): the verbs that mean the server, not one replica
// of it (start, stop, restart), go there so that each replica does them.
func (s Subjects) ControlAll(server string) string { return s.join("control", server, "all") }

// Runtime is a control-plane subject: verb is start, stop, restart or status.
func (s Subjects) Runtime(verb string) string { return s.join("runtime", verb) }

// Service is a control-plane subject of a named service (config, cred, registry, chat).
func (s Subjects) Service(service, verb string) string { return s.join(service, verb) }

// GatewayRetry is where one gateway instance takes the multi round-trip
// retries (MCP 2026-07-28) of the calls it holds that reached another
// instance; only gateways publish and subscribe there.
func (s Subjects) GatewayRetry(instance string) string { return s.join("gateway", "retry", instance) }

// OAuthCallback is where the gateway instance holding an OAuth flow takes
// its callback from whichever instance the browser reached (flow: the
// flow's key in BucketOAuthFlows).
func (s Subjects) OAuthCallback(flow string) string { return s.join("oauth", "callback", flow) }

// Task is the subject of a task verb (create, get, result, cancel, list).
func (s Subjects) Task(verb string) string { return s.join("task", verb) }

// TaskRun is the work-queue subject of one server's task runs; TaskRuns all of them.
func (s Subjects) TaskRun(server string) string { return s.join("tasks", "run", server) }
func (s Subjects) TaskRuns() string             { return s.join("tasks", "run", ">") }

// Audit is the subject of one audit chain ("<role>.<public key>").
func (s Subjects) Audit(chain string) string { return s.join("audit", chain) }

// AuditAll matches every audit chain.
func (s Subjects) AuditAll() string { return s.join("audit", ">") }

// Event is the event subject of kind (status, config, call, chat) about name.
func (s Subjects) Event(kind, name string) string { return s.join("events", kind, name) }

// Events matches every event.
func (s Subjects) Events() string { return s.join("events", ">") }

// EventsOf matches every event of one kind.
func (s Subjects) EventsOf(kind string) string { return s.join("events", kind, "*") }

// AgentToken is the token after the prefix that starts an agent's own
// subjects: an agent named n requests <prefix>.agent.n.call.<server>.<tool>
// (and rpc, cancel, tools.list, tools.search) instead of <prefix>.call.…; the bus lets
// only n publish under <prefix>.agent.n, so the subject names the caller
// and no message can claim another (docs/design.md section 11).
const AgentToken = "agent"

// ForAgent is the subject builder of agent's own requests: the subjects
// under <prefix>.agent.<agent>.
func (s Subjects) ForAgent(agent string) Subjects { return Subjects{Prefix: s.join(AgentToken, agent)} }

// AgentCallAll matches every agent's calls of server's tools.
func (s Subjects) AgentCallAll(server string) string {
	return s.join(AgentToken, "*", "call", server, "*")
}

// AgentRPC matches every agent's rpc requests to server.
func (s Subjects) AgentRPC(server string) string { return s.join(AgentToken, "*", "rpc", server) }

// AgentCancel matches every agent's cancellations at server.
func (s Subjects) AgentCancel(server string) string { return s.join(AgentToken, "*", "cancel", server) }

// AgentToolsList matches every agent's tools.list.
func (s Subjects) AgentToolsList() string { return s.join(AgentToken, "*", "tools", "list") }

// AgentToolsSearch matches every agent's tools.search.
func (s Subjects) AgentToolsSearch() string { return s.join(AgentToken, "*", "tools", "search") }

// AgentOf splits an agent's subject into the agent's name and the subject
// it stands for (<prefix>.agent.a1.call.x.y → "a1", <prefix>.call.x.y);
// ok is false for any other subject.
func (s Subjects) AgentOf(subject string) (agent, plain string, ok bool) {
	rest, found := strings.CutPrefix(subject, s.Prefix+"."+AgentToken+".")
	if !found {
		return "", subject, false
	}
	agent, rest, found = strings.Cut(rest, ".")
	if !found || agent == "" {
		return "", subject, false
	}
	return agent, s.Prefix + "." + rest, true
}

// IsInbox reports whether reply is an inbox a responder may answer into:
// an identity's `_I.<name>.…` or nats.go's `_INBOX.…` (an unauthenticated
// bus). Anything else (a stream's API, a KV key, a service subject) would
// make the responder publish there with its own rights for whoever sent
// the request, so responders refuse it (RefuseReply).
func IsInbox(reply string) bool {
	if reply == "" || strings.ContainsAny(reply, " \t\r\n*>") {
		return false
	}
	if rest, ok := strings.CutPrefix(reply, "_INBOX."); ok {
		return rest != "" && !strings.HasPrefix(rest, ".")
	}
	rest, ok := strings.CutPrefix(reply, "_I.")
	if !ok {
		return false
	}
	name, tail, ok := strings.Cut(rest, ".")
	return ok && name != "" && tail != "" && !strings.HasPrefix(tail, ".")
}

// QueueGroup is the queue group of the replicas of server.
func QueueGroup(server string) string { return "mcp." + server }

// TokenAt returns the n-th dot-separated token of subject (0-based), or "".
func TokenAt(subject string, n int) string {
	for i := 0; i < n; i++ {
		j := strings.IndexByte(subject, '.')
		if j < 0 {
			return ""
		}
		subject = subject[j+1:]
	}
	if j := strings.IndexByte(subject, '.'); j >= 0 {
		return subject[:j]
	}
	return subject
}

// UnderReplyPrefix reports whether subject may receive what a caller whose
// request came with reply asked for in a header (progress, client
// requests). On an authenticated bus every reply prefix is `_I.<identity>`
// and the subject must share those two tokens, so a caller cannot aim the
// runner at another identity's inbox; elsewhere (nats.go's `_INBOX`, no
// identities) the first token must match. Wildcards are never accepted.
func UnderReplyPrefix(reply, subject string) bool {
	if reply == "" || subject == "" || strings.ContainsAny(subject, " \t\r\n*>") {
		return false
	}
	first, _, ok := strings.Cut(reply, ".")
	if !ok || !strings.HasPrefix(subject, first+".") {
		return false
	}
	if first != "_I" {
		return true
	}
	second := TokenAt(reply, 1)
	return second != "" && TokenAt(subject, 1) == second && strings.Count(subject, ".") >= 2
}
