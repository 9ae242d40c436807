// Package service is the shape every mcpbus service shares: one Definition
// (name, options with their flags, env vars, defaults and validation, a
// constructor) that runs the same whether the service is alone in its own
// process (RunAlone, `mcpbus serve <name>`) or one of all of them in
// `mcpbus up`, and one lifecycle contract (Run until the context ends, Ready
// once it answers).
package service

import (
	"context"
	"github.com/mcpbus/mcpbus/libs/audit"
	"github.com/nats-io/nkeys"
	"io"
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/ops"
	"github.com/mcpbus/mcpbus/libs/settings"
)

// Service is a built service.
type Service interface {
	// Run serves until ctx ends, then stops cleanly (drains its endpoints,
	// stops what it started) and returns; an error means it failed.
	Run(ctx context.Context) error
	// Ready is closed once the service answers on the bus (and, for the
	// gateway, over HTTP).
	Ready() <-chan struct{}
}

// Checker is a service with readiness conditions of its own beyond answering
// on the bus (the credential service: its backend answers). Each Err must
// answer at once (ops.Check).
type Checker interface {
	Checks() []ops.Check
}

// Announcer is a service with something to tell the person who started it
// once it is ready (where to point a browser, where a key was written).
type Announcer interface {
	Announce(w io.Writer)
}

// Env is what the host hands a service when building it.
type Env struct {
	// Conn is the service's own NATS connection.
	Conn *nats.Conn
	// Prefix of every subject (default mcp.v1).
	Prefix string
	// DataDir is this host's data directory.
	DataDir string
	// Replicas of the JetStream assets the service creates (1 on one node,
	// 3 on a 3-node cluster).
	Replicas int
	Logger   *slog.Logger
	// Identity is the service's bus identity (its nkey, read once at start),
	// for what it must prove beyond its connection (a runner signs its
	// resolves); nil on an unauthenticated bus.
	Identity nkeys.KeyPair
	// SharedHost is true when every service runs on this host (mcpbus up),
	// so paths that configs name can be checked where they are saved.
	SharedHost bool
	// Protected are paths outside DataDir that hold this process's secrets
	// (its NATS identity files and their directory): the runner keeps the
	// MCP servers it starts from reading them.
	Protected []string
}

// Options are one service's settings: its options type implements this.
type Options interface {
	// Register adds the service's own flags and env vars, with defaults.
	Register(s *settings.Set)
	// Validate checks the settings before anything connects: a bad value
	// stops the process at once with an error that names the setting.
	Validate() error
	// Build validates the settings and makes the service; a setting that
	// turns the service off (the gateway with no address) returns nil, nil.
	Build(ctx context.Context, env Env) (Service, error)
}

// Definition is one row of the service table.
type Definition struct {
	// Name is the service's short name: `mcpbus serve <name>`, its NATS
	// connection mcpbus-<name>, its telemetry service name.
	Name string
	// Summary is one line of help.
	Summary string
	// Version of the service's bus API (micro requires semver).
	Version string
	// Options returns fresh options; the table's host registers and fills them.
	Options func() Options
}

// ConnName is the NATS connection name of a service.
func ConnName(name string) string { return "mcpbus-" + name }

// AuditWriter is the writer of the service's audit chains (libs/audit),
// signing with its identity; nil (whose Append does nothing) on a bus
// without identities, where there is no key to sign with.
func (e Env) AuditWriter(role string) (*audit.Writer, error) {
	if e.Identity == nil {
		return nil, nil
	}
	return audit.NewWriter(e.Conn, audit.WriterOptions{Prefix: e.Prefix, Role: role, Key: e.Identity, Logger: e.Logger})
}
