// Package model holds the data model of docs/design.md as Go types: the McpConfig
// record, server status and the tool catalog. JSON field names are the contract.
package model

import (
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// Source types.
const (
	SourceOfficial = "official"
	SourceSmithery = "smithery"
	SourceManual   = "manual"
)

// MsgRegistryRemoteInternal ends the error of a remote server installed
// from a registry whose connection was refused for its address (a name
// that resolves to loopback, the network, cloud metadata):
// "transport.url reaches an internal address, <host:port> (<class>): " + this.
const MsgRegistryRemoteInternal = "a server installed from a registry may reach public addresses only; add it by hand to reach one inside your network"

// Package types.
const (
	PackageNPM    = "npm"
	PackageDocker = "docker"
	PackageBinary = "binary"
	PackageHTTP   = "http"
)

// Transport types.
const (
	TransportStdio = "stdio"
	TransportHTTP  = "http"
)

// Auth types.
const (
	AuthNone    = "none"
	AuthAPIKey  = "api_key"
	AuthKeyfile = "keyfile"
	AuthOAuth   = "oauth"
)

// McpConfig is one configured MCP server.
type McpConfig struct {
	ID        string    `json:"id,omitempty"`
	Name      string    `json:"name"`
	Slug      string    `json:"slug,omitempty"`
	Enabled   bool      `json:"enabled"`
	Source    Source    `json:"source,omitzero"`
	Package   Package   `json:"package,omitzero"`
	Transport Transport `json:"transport"`
	AuthType  string    `json:"auth_type,omitempty"`
	// Auth says whose upstream credentials a remote server's calls carry.
	Auth    ServerAuth        `json:"auth,omitzero"`
	EnvVars map[string]EnvVar `json:"env_vars,omitempty"`
	Config  json.RawMessage   `json:"config,omitempty"`
	// Tools filters the server's tools (allow/deny globs), enforced by the runner.
	Tools ToolFilter `json:"tools,omitzero"`
	// Pin is the policy for tool definitions that change after they were
	// first seen (PinStrict, PinWarn, PinOff; empty: PinPolicy's default).
	Pin string `json:"pin,omitempty"`
	// SecretScan is the policy for secrets found in the server's tool
	// arguments and results (empty: block arguments, redact results). Not
	// "secrets": that name is the clear secrets every request refuses.
	SecretScan SecretsPolicy `json:"secret_scan,omitzero"`
	// Runtime holds the runner's per-server settings; zero values take the runner's defaults.
	Runtime Runtime `json:"runtime,omitzero"`
	// Roots are offered to the server as its client's roots (MCP roots/list),
	// e.g. the directories a filesystem server may use. A change reaches a
	// running server as notifications/roots/list_changed, without a restart.
	Roots     []Root    `json:"roots,omitempty"`
	CreatedAt time.Time `json:"created_at,omitzero"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	Revision  uint64    `json:"revision,omitempty"`
	// Version numbers this server's changes: 1 at create, then 2, 3… (a
	// toggle, an update, a delete, a rollback each take the next). Set by the
	// config service when it writes; history and rollback go by it. Revision
	// is the store's (KV) revision, shared by all servers: the token of
	// compare-and-set updates.
	Version uint64 `json:"version,omitempty"`
}

// Root is one MCP root: a file:// URI and an optional display name.
type Root struct {
	URI  string `json:"uri"`
	Name string `json:"name,omitempty"`
}

// Source is where a config came from.
type Source struct {
	Type          string `json:"type"`
	Name          string `json:"name,omitempty"`
	Version       string `json:"version,omitempty"`
	QualifiedName string `json:"qualified_name,omitempty"`
	URL           string `json:"url,omitempty"`
}

// Package is what to run.
type Package struct {
	Type        string `json:"type"`
	Identifier  string `json:"identifier"`
	RuntimeHint string `json:"runtime_hint,omitempty"`
	// RuntimeArgs go to the runtime, before the package: docker run flags
	// before the image (e.g. --mount), npx flags before the package.
	RuntimeArgs []string `json:"runtime_args,omitempty"`
	Args        []string `json:"args,omitempty"`
}

// Transport is how to talk to the server.
type Transport struct {
	Type    string            `json:"type"`
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	// SecretHeaders names headers whose values the credential service holds
	// (imported Authorization headers and the like): they are never in
	// Headers, and an export writes them as ${VAR} placeholders.
	SecretHeaders []string `json:"secret_headers,omitempty"`
	// OAuth configures the OAuth client (`mcpbus servers auth`) when the
	// authorization server does not register clients dynamically.
	OAuth *TransportOAuth `json:"oauth,omitempty"`
}

// EnvVar is one environment variable of a stdio server. Exactly one of Value,
// SecretRef and KeyfilePath is normally set.
type EnvVar struct {
	Value       string `json:"value,omitempty"`
	SecretRef   string `json:"secret_ref,omitempty"`
	KeyfilePath string `json:"keyfile_path,omitempty"`
	IsSecret    bool   `json:"is_secret,omitempty"`
	Required    bool   `json:"required,omitempty"`
}

// Runtime holds per-server runner settings. Durations are Go duration strings
// ("30s"); zero values take the runner's defaults.
type Runtime struct {
	CallTimeout  Duration `json:"call_timeout,omitzero"`
	StartTimeout Duration `json:"start_timeout,omitzero"`
	// Eager starts the server as soon as a runner owns it; otherwise it starts
	// on its first call (a server never seen before is started once to learn its tools).
	Eager bool `json:"eager,omitempty"`
	// IdleTimeout stops a server after this long without calls (negative: never).
	IdleTimeout Duration `json:"idle_timeout,omitzero"`
	// MaxInflight bounds the calls a server runs at once; more are refused.
	MaxInflight int `json:"max_inflight,omitempty"`
	// Replicas is how many runners run the server at once, sharing its calls.
	Replicas int `json:"replicas,omitempty"`
}

// ServersFile is the file `mcpbus up --config` loads.
type ServersFile struct {
	Servers []McpConfig `json:"servers"`
}

// Duration is a time.Duration written as a Go duration string in JSON.
type Duration time.Duration

// MarshalJSON writes "30s".
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads "30s" or a number of milliseconds; null leaves d as it is.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		*d = Duration(v)
		return nil
	}
	var ms int64
	if err := json.Unmarshal(b, &ms); err != nil {
		return err
	}
	if ms > math.MaxInt64/int64(time.Millisecond) || ms < math.MinInt64/int64(time.Millisecond) {
		return fmt.Errorf("duration of %d ms is out of range", ms)
	}
	*d = Duration(time.Duration(ms) * time.Millisecond)
	return nil
}

// Or returns d, or def when d is zero or negative.
func (d Duration) Or(def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return time.Duration(d)
}
