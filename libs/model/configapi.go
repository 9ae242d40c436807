package model

import (
	"path"
	"time"
)

// ToolFilter narrows the tools of a server: with
// Allow set, only tools matching one of its globs are kept; tools matching a
// Deny glob are always dropped. Globs are path.Match patterns on the original
// tool name. A filtered tool is absent from the catalog and refused on call.
type ToolFilter struct {
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
}

// Allows reports whether the filter keeps tool.
func (f ToolFilter) Allows(tool string) bool { return f.AllowsNames(tool) }

// AllowsNames reports whether the filter keeps a tool known by several
// names (ToolNames): one of them allowed, none denied.
func (f ToolFilter) AllowsNames(names ...string) bool { return allows(f.Allow, f.Deny, names) }

// allows: with allow set one of names matches it, and none matches deny.
func allows(allow, deny, names []string) bool {
	kept := len(allow) == 0
	for _, n := range names {
		if matchAny(deny, n) {
			return false
		}
		kept = kept || matchAny(allow, n)
	}
	return kept
}

// IsZero reports whether the filter keeps every tool.
func (f ToolFilter) IsZero() bool { return len(f.Allow) == 0 && len(f.Deny) == 0 }

func matchAny(globs []string, name string) bool {
	for _, g := range globs {
		if ok, _ := path.Match(g, name); ok {
			return true
		}
	}
	return false
}

// ConfigRef names one config by slug or id: the body of mcp.v1.config.{get,
// delete,enable,disable,history}.
type ConfigRef struct {
	Server string `json:"server"`
}

// ConfigCreateRequest is the body of mcp.v1.config.create. Secret values may
// come along in Secrets, or as env var values marked is_secret: either way they
// go to the credential service, never into the stored config.
//
// On the bus, secrets travel sealed (SealedSecrets): the config service never
// sees a value and refuses clear ones (Secrets, or secret values left in the
// config). libs/client.CreateConfig moves them out and seals them.
type ConfigCreateRequest struct {
	Config  McpConfig    `json:"config"`
	Secrets *Credentials `json:"secrets,omitempty"`
	SealedSecrets
}

// SealedSecrets are the secrets of one config sealed to the credential
// service: Sealed opens (with its key and SenderKey) to the JSON of
// Credentials. The config service passes them to mcp.v1.cred.set as they are;
// Names tell it what they hold.
type SealedSecrets struct {
	Sealed    []byte       `json:"sealed_secrets,omitempty"`
	SenderKey string       `json:"sender_key,omitempty"`
	Names     *SecretNames `json:"secret_names,omitempty"`
}

// IsZero reports whether no sealed secrets come along.
func (s SealedSecrets) IsZero() bool {
	return len(s.Sealed) == 0 && s.SenderKey == "" && s.Names == nil
}

// ConfigUpdateRequest is the body of mcp.v1.config.update: the whole new
// config (found by id, else slug). A non-zero Revision must be the current one
// (optimistic concurrency: a stale revision is a CONFLICT).
type ConfigUpdateRequest struct {
	Config  McpConfig    `json:"config"`
	Secrets *Credentials `json:"secrets,omitempty"`
	SealedSecrets
}

// ConfigListReply is the reply of mcp.v1.config.list.
type ConfigListReply struct {
	Configs []McpConfig `json:"configs"`
}

// ConfigDeleteReply is the reply of mcp.v1.config.delete.
type ConfigDeleteReply struct {
	ID     string `json:"id"`
	Server string `json:"server"`
}

// Import and export formats.
const (
	// FormatServers is mcpbus's own {"servers": [McpConfig…]} (JSON or YAML).
	FormatServers = "servers"
	// FormatMCPServers is the Claude Desktop / Cursor {"mcpServers": {name: {command, args, env | url, headers}}}.
	FormatMCPServers = "mcpServers"
	// FormatMCPYAML is a coding agent's mcp.yaml (servers: name: transport, env, enabled).
	FormatMCPYAML = "mcp.yaml"
)

// ConfigImportRequest is the body of mcp.v1.config.import. Vars resolve the
// ${VAR} references of the content. All servers are imported or none.
//
// A file whose servers carry secrets is parsed by the writer
// (libs/client.ImportConfigs): it sends Entries, each config with its secrets
// sealed, and no Content; the config service refuses secret values in clear.
type ConfigImportRequest struct {
	Format  string            `json:"format,omitempty"` // detected when empty
	Content string            `json:"content,omitempty"`
	Vars    map[string]string `json:"vars,omitempty"`
	// Entries are the servers already parsed, instead of Content.
	Entries []ConfigImportEntry `json:"entries,omitempty"`
	// Replace updates servers whose slug exists; otherwise a clash is a CONFLICT.
	Replace bool `json:"replace,omitempty"`
	// Enabled, when set, overrides the enabled flag of every imported server.
	Enabled *bool `json:"enabled,omitempty"`
}

// ConfigImportEntry is one parsed server of an import: its config, with no
// secret value left in it, and its secrets sealed.
type ConfigImportEntry struct {
	Config McpConfig `json:"config"`
	SealedSecrets
}

// ConfigImportReply lists what an import wrote.
type ConfigImportReply struct {
	Created []McpConfig `json:"created"`
	Updated []McpConfig `json:"updated"`
}

// ConfigExportRequest is the body of mcp.v1.config.export (no servers: all).
type ConfigExportRequest struct {
	Format  string   `json:"format"`
	Servers []string `json:"servers,omitempty"`
}

// ConfigExportReply carries the exported file; secrets appear only as ${VAR}.
type ConfigExportReply struct {
	Format  string `json:"format"`
	Content string `json:"content"`
	// Warnings name, one line per server, the settings the format could not
	// hold (tool filters, timeouts… in the client formats); none in mcpbus's
	// own servers format, which is lossless.
	Warnings []string `json:"warnings,omitempty"`
}

// ConfigRevision is one entry of a config's history.
type ConfigRevision struct {
	// Version is the server's own number of this entry (1, 2, 3…); rollback
	// takes it. Revision is the store's, shared by all servers.
	Version   uint64     `json:"version"`
	Revision  uint64     `json:"revision"`
	Operation string     `json:"operation"` // put, delete
	At        time.Time  `json:"at"`
	Config    *McpConfig `json:"config,omitempty"`
}

// ConfigHistoryReply is the reply of mcp.v1.config.history, oldest first.
type ConfigHistoryReply struct {
	Revisions []ConfigRevision `json:"revisions"`
}

// ConfigRollbackRequest is the body of mcp.v1.config.rollback: the config
// becomes what it was at Revision (a new revision is written).
type ConfigRollbackRequest struct {
	Server string `json:"server"`
	// Version is the server's own number of the entry (history's version);
	// Revision, the store's revision, is still accepted. Give one.
	Version  uint64 `json:"version,omitempty"`
	Revision uint64 `json:"revision,omitempty"`
}

// Config event types.
const (
	ConfigCreated    = "created"
	ConfigUpdated    = "updated"
	ConfigDeleted    = "deleted"
	ConfigEnabled    = "enabled"
	ConfigDisabled   = "disabled"
	ConfigRolledBack = "rolled_back"
)

// ConfigEvent is published on mcp.v1.events.config.<server> after every change.
type ConfigEvent struct {
	Type      string    `json:"type"`
	Server    string    `json:"server"`
	ID        string    `json:"id"`
	Revision  uint64    `json:"revision,omitempty"`
	Version   uint64    `json:"version,omitempty"` // the server's own (McpConfig.Version); absent for deleted
	Enabled   bool      `json:"enabled"`
	RequestID string    `json:"request_id,omitempty"`
	At        time.Time `json:"at"`
}
