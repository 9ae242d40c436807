package config

import (
	"context"
	"fmt"
	"github.com/mcpbus/mcpbus/libs/access"
	"time"

	"github.com/mcpbus/mcpbus/libs/service"
	"github.com/mcpbus/mcpbus/libs/settings"
)

// DefaultStartTimeout is how long enable waits for a runner to start a server.
const DefaultStartTimeout = 90 * time.Second

// Definition is the config service's row of the service table.
func Definition() service.Definition {
	return service.Definition{Name: "config", Version: Version,
		Summary: "McpConfig records: create, update, enable/disable, import/export, history",
		Options: func() service.Options { return &Options{} }}
}

// Register adds the service's settings.
func (o *Options) Register(s *settings.Set) {
	s.Duration(&o.StartTimeout, "start-timeout", "", DefaultStartTimeout, "how long enable waits for a runner to start the server")
	s.Bool(&o.CheckKeyfiles, "check-keyfiles", "", false,
		"check keyfile paths on this host when a config is saved: right only when the runners share it (always on in mcpbus up)")
}

// Validate checks the settings.
func (o *Options) Validate() error {
	if o.StartTimeout < 0 {
		return fmt.Errorf("--start-timeout %s must not be negative", o.StartTimeout)
	}
	return nil
}

// Build makes the service from its settings and the host's.
func (o *Options) Build(_ context.Context, env service.Env) (service.Service, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	opts := *o
	opts.Prefix, opts.Logger, opts.Replicas = env.Prefix, env.Logger, env.Replicas
	// The runners share this host: keyfile paths can be checked when saved.
	opts.CheckKeyfiles = opts.CheckKeyfiles || env.SharedHost
	w, err := env.AuditWriter(string(access.Config))
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	opts.Audit = w
	return New(env.Conn, opts)
}
