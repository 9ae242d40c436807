package model

import (
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
}

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
	// Subjects are the call and rpc subjects it may request.
	Subjects []string `json:"subjects"`
}

// AgentList is the reply of mcp.v1.agents.list.
type AgentList struct {
	Agents []Agent `json:"agents"`
}
