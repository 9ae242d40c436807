package model

import (
	"path"
	"strings"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// AgentCreateRequest asks mcpbus up for a bus identity for an agent
// (mcp.v1.agents.create).
type AgentCreateRequest struct {
	// Name of the agent: [a-z0-9_-], at most 50 characters.
	Name string `json:"name"`
	// Allow are globs on <server>__<tool>: the tools the agent may call
	// (none: every tool).
	Allow []string `json:"allow,omitempty"`
	// MaxInflight bounds its calls in flight at one server (0: the runner's default).
	MaxInflight int `json:"max_inflight,omitempty"`
	// Rate bounds its requests at each runner (nil: DefaultAgentRate).
	Rate *KeyRate `json:"rate,omitempty"`
}

// DefaultAgentRate is an agent's rate at each runner without one of its
// own: an API key's default at the gateway.
var DefaultAgentRate = KeyRate{RPS: 20, Burst: 40}

// ValidateAgentName checks an agent's name: [a-z0-9_-], at most 50
// characters (it becomes a NATS user and an inbox prefix).
func ValidateAgentName(name string) error {
	if !ValidSlug(name) || len(name) > 50 {
		return apierr.Invalid("name", "name must be [a-z0-9_-], at most 50 characters")
	}
	return nil
}

// AgentRef names an agent (mcp.v1.agents.revoke).
type AgentRef struct {
	Name string `json:"name"`
}

// Agent describes an agent identity; its seed never crosses the bus: it is
// in SeedFile (0600) on the host of mcpbus up.
type Agent struct {
	Name        string    `json:"name"`
	Allow       []string  `json:"allow"`
	Created     time.Time `json:"created"`
	SeedFile    string    `json:"seed_file"`
	InboxPrefix string    `json:"inbox_prefix"`
	MaxInflight int       `json:"max_inflight,omitempty"`
	Rate        *KeyRate  `json:"rate,omitempty"`
	// SubjectPrefix starts every subject it requests: <prefix>.agent.<name>
	// (SubjectPrefix.call.<server>.<tool>, .rpc.<server>, .cancel.<server>,
	// .tools.list).
	SubjectPrefix string `json:"subject_prefix"`
	// Subjects are the subjects it may request.
	Subjects []string `json:"subjects"`
}

// AgentList is the reply of mcp.v1.agents.list.
type AgentList struct {
	Agents []Agent `json:"agents"`
}

// AgentRecord is what runners know of an agent (KV mcp_agents, key: its
// name), written by the host that made it: the tools it may call and its
// share of a server's calls. The runner checks every request that arrives
// under <prefix>.agent.<name> against it; an agent without a record may do
// nothing.
type AgentRecord struct {
	Name  string   `json:"name"`
	Allow []string `json:"allow"`
	// MaxInflight bounds the agent's calls in flight at one server (0: the
	// runner's --agent-max-inflight), so one agent's flood never takes the
	// slots another caller's calls need.
	MaxInflight int `json:"max_inflight,omitempty"`
	// Rate bounds its calls, rpc, tools.list and tools.search requests at
	// each runner (nil: DefaultAgentRate), so its volume cannot push the
	// audit stream's older records out within minutes.
	Rate *KeyRate `json:"rate,omitempty"`
}

// Allows reports whether the agent may call the tool known by names
// (ToolNames: as shown to it, <server>__<tool>, first): a path.Match glob of
// Allow matches one of them.
func (a AgentRecord) Allows(names ...string) bool {
	for _, n := range names {
		if matchAny(a.Allow, n) {
			return true
		}
	}
	return false
}

// AllowsWholeServer reports whether some glob of Allow names every tool of
// server ("*", or "<server pattern>__*"): what its resources, prompts and
// completions need, which belong to no one tool.
func (a AgentRecord) AllowsWholeServer(server string) bool {
	for _, g := range a.Allow {
		if g == "*" {
			return true
		}
		if s, tool, ok := strings.Cut(g, "__"); ok && tool == "*" {
			if m, _ := path.Match(s, server); m {
				return true
			}
		}
	}
	return false
}

// AllowsServer reports whether some glob of Allow could match a tool of
// server (its rpc, cancel and events).
func (a AgentRecord) AllowsServer(server string) bool {
	for _, g := range a.Allow {
		s, _, ok := strings.Cut(g, "__")
		if !ok {
			s = g
		}
		if m, _ := path.Match(s, server); m {
			return true
		}
	}
	return false
}
