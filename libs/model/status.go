package model

import (
	"encoding/json"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// States of a server.
const (
	StateStopped = "stopped"
	// StateIdle: owned and served, no process; the next call starts it.
	StateIdle     = "idle"
	StateStarting = "starting"
	StateRunning  = "running"
	StateError    = "error"
	StateDisabled = "disabled"
)

// Status is the latest state of a server (KV mcp_status, events status.<server>).
type Status struct {
	Server  string   `json:"server"`
	State   string   `json:"state"`
	Tools   []string `json:"tools,omitempty"`
	Code    string   `json:"code,omitempty"`
	Message string   `json:"message,omitempty"`
	// Field is the setting or config field the last failure names, if any.
	Field     string    `json:"field,omitempty"`
	Runner    string    `json:"runner,omitempty"`
	PID       int       `json:"pid,omitempty"`
	StartedAt time.Time `json:"started_at,omitzero"`
	UpdatedAt time.Time `json:"updated_at"`
	Calls     uint64    `json:"calls,omitempty"`
	Errors    uint64    `json:"errors,omitempty"`
	// Restarts counts automatic restarts after crashes and failed health checks.
	Restarts uint64 `json:"restarts,omitempty"`
	// Replicas is how many runners run the server now; ReplicasWanted what
	// its config asks for (shown when more than one, or when fewer run).
	Replicas       int `json:"replicas,omitempty"`
	ReplicasWanted int `json:"replicas_wanted,omitempty"`
	// RetryAt is when the next automatic restart of a server in error runs,
	// set in the same write as the error: an error with it is followed by a
	// restart, one without it is not (the automatic restarts gave up, or
	// the error is never retried: UNAUTHORIZED, exec policy, …) until
	// someone restarts the server. Only on StateError.
	RetryAt time.Time `json:"retry_at,omitzero"`
}

// NextRestartNote ends the message of a start refused while a server's
// automatic restarts after a failure are under way, before the time of the
// next one. An enable that failed and was reverted drops it: the server is
// disabled again, so no restart follows.
const NextRestartNote = "; next automatic restart at "

// StatusFieldMaxServers is the Field of a server in error because its
// runner is at its server limit (--max-servers): it waits for room, which
// the runner gives it as soon as a slot frees, so a call may try at once.
const StatusFieldMaxServers = "max_servers"

// Tool is one catalog entry: a tool of one server, with its bus names.
type Tool struct {
	// Name is the namespaced name shown to LLMs and MCP clients: <server>__<tool>.
	Name string `json:"name"`
	// Server is the server slug.
	Server string `json:"server"`
	// Tool is the original tool name on the MCP server.
	Tool string `json:"tool"`
	// Subject is the bus subject to call it on.
	Subject     string          `json:"subject"`
	Title       string          `json:"title,omitempty"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
	// OutputSchema is the tool's declared structured output, if any.
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
	Annotations  json.RawMessage `json:"annotations,omitempty"`
}

// Catalog is the tool list of one running or idle server (KV mcp_tools, key = slug).
type Catalog struct {
	Server string `json:"server"`
	// ConfigRevision is the config revision the list was read under; a runner
	// taking the server over reuses it only for the same revision.
	ConfigRevision uint64    `json:"config_revision,omitempty"`
	Tools          []Tool    `json:"tools"`
	UpdatedAt      time.Time `json:"updated_at"`
}

// ToolsListRequest is the body of mcp.v1.tools.list.
type ToolsListRequest struct {
	Server string `json:"server,omitempty"`
}

// ToolsListReply is the reply of mcp.v1.tools.list.
type ToolsListReply struct {
	Tools []Tool `json:"tools"`
}

// RPCRequest is the body of mcp.v1.rpc.<server>.
type RPCRequest struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params,omitempty"`
}

// RuntimeRequest is the body of mcp.v1.runtime.{start,stop,restart,status}.
type RuntimeRequest struct {
	Server string `json:"server,omitempty"`
	// Principal, for forget only: whose per-principal upstream session the
	// owner closes (their credentials changed or were revoked).
	Principal string `json:"principal,omitempty"`
	// IfRunning, for restart only: restart the replicas NeedsRestartForSecrets
	// names (running, starting, in error) and leave the others (stopped,
	// idle) as they are; they take what is stored at their next start. A
	// secret change asks so (client.ApplySecrets). The reply is the status
	// of a replica that restarted when one did.
	IfRunning bool `json:"if_running,omitempty"`
}

// NeedsRestartForSecrets reports whether a server in state uses changed
// secrets only once restarted: running or starting (it read the old ones),
// or in error (its upstream refused them, or its restarts ran out: nothing
// else starts it again, and new secrets are what it waits for). An idle or
// stopped one reads them at its next start.
func NeedsRestartForSecrets(state string) bool {
	return state == StateRunning || state == StateStarting || state == StateError
}

// RuntimeStatusReply is the reply of mcp.v1.runtime.status without a server.
type RuntimeStatusReply struct {
	Servers []Status `json:"servers"`
}

// CallEvent is the audit record of one tool call (events call.<server>).
type CallEvent struct {
	Server    string `json:"server"`
	Tool      string `json:"tool"`
	RequestID string `json:"request_id,omitempty"`
	TraceID   string `json:"trace_id,omitempty"`
	Outcome   string `json:"outcome"` // ok, tool_error, error, timeout, cancelled
	Code      string `json:"code,omitempty"`
	// Error is the message of the error reply (outcomes error, timeout and
	// cancelled): one line, at most CallEventErrorMax characters, the
	// server's known secrets redacted.
	Error      string    `json:"error,omitempty"`
	DurationMS float64   `json:"duration_ms"`
	At         time.Time `json:"at"`
	Runner     string    `json:"runner,omitempty"`
	// Caller is who asked, when the bus names it: "agent:<name>".
	Caller string `json:"caller,omitempty"`
	// Principal is who the call was made for (libs/principal id: the
	// agent, or the API key or OAuth subject the gateway or chat acted for).
	Principal string `json:"principal,omitempty"`
	// NotRun: the call was refused before the MCP server saw it (the runner
	// had let the server go): it did not run (bus.HeaderNotRun).
	NotRun bool `json:"not_run,omitempty"`
	// Secrets are the rules of secretscan that fired on the call's arguments
	// or result and what was done (block or redact); never the values.
	Secrets []SecretFound `json:"secrets,omitempty"`
}

// CallEventErrorMax bounds CallEvent.Error, in characters.
const CallEventErrorMax = 300

// OneLine is a text from outside mcpbus (a server's error, a token
// endpoint's error code) made fit for an event or a log record: control
// characters and runs of spaces made one space, at most limit characters,
// "…" marking a cut. It redacts nothing: a caller that knows secrets
// redacts them first.
func OneLine(text string, limit int) string {
	msg := strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, text)
	msg = strings.Join(strings.Fields(msg), " ")
	if utf8.RuneCountInString(msg) > limit {
		msg = string([]rune(msg)[:limit-1]) + "…"
	}
	return msg
}

// ProgressEvent is one MCP progress notification forwarded to a caller.
type ProgressEvent struct {
	RequestID string  `json:"request_id,omitempty"`
	Progress  float64 `json:"progress"`
	Total     float64 `json:"total,omitempty"`
	Message   string  `json:"message,omitempty"`
}

// ClientRequest is a request an MCP server made of its client during a call
// (elicitation/create, sampling/createMessage), relayed by the runner as a
// NATS request to the subject the caller named in Mcp-Client-Subject. The
// reply is the MCP result of Method (e.g. {"action":"accept","content":{…}})
// or an error in the contract (the server then sees a JSON-RPC error).
type ClientRequest struct {
	RequestID string          `json:"request_id,omitempty"`
	Server    string          `json:"server"`
	Method    string          `json:"method"`
	Params    json.RawMessage `json:"params,omitempty"`
}

// Methods a server may ask of its client during a call that mcpbus relays.
const (
	MethodElicit        = "elicitation/create"
	MethodCreateMessage = "sampling/createMessage"
)

// RetryAfterSeconds is d in whole seconds, rounded up, at least 1: the
// value of a Retry-After header, and the seconds a "retry after" names.
func RetryAfterSeconds(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	return s
}
