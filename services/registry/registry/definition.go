package registry

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/service"
	"github.com/mcpbus/mcpbus/libs/settings"
)

// Defaults of the registry settings.
const (
	DefaultSourceTimeout = 5 * time.Second
	DefaultCacheTTL      = 10 * time.Minute
	DefaultStaleTTL      = 24 * time.Hour
)

// EnvSmitheryAPIKey holds a Smithery key; without it the key stored with
// `mcpbus cred set-registry-key` is used. Only the environment: a flag would
// show in ps.
const EnvSmitheryAPIKey = "SMITHERY_API_KEY"

// Definition is the registry service's row of the service table.
func Definition() service.Definition {
	return service.Definition{Name: "registry", Version: Version,
		Summary: "search of the Official MCP Registry and Smithery, install plans",
		Options: func() service.Options { return &Options{} }}
}

// Register adds the service's settings.
func (o *Options) Register(s *settings.Set) {
	s.String(&o.OfficialURL, "official-registry-url", "", DefaultOfficialURL, "base URL of the Official MCP Registry or a private sub-registry")
	s.String(&o.SmitheryURL, "smithery-registry-url", "", DefaultSmitheryURL, "base URL of Smithery's registry API (key: "+EnvSmitheryAPIKey+" or the stored one)")
	s.Duration(&o.SourceTimeout, "registry-source-timeout", "", DefaultSourceTimeout, "how long one registry may take to answer")
	s.Duration(&o.CacheTTL, "registry-cache-ttl", "", DefaultCacheTTL, "how long a registry answer is reused")
	s.Duration(&o.StaleTTL, "registry-stale-ttl", "", DefaultStaleTTL, "how long an expired answer may stand in while a registry is down")
}

// Validate checks the registry URLs and durations.
func (o *Options) Validate() error {
	for flag, u := range map[string]string{"official-registry-url": o.OfficialURL, "smithery-registry-url": o.SmitheryURL} {
		if u == "" {
			continue
		}
		if _, err := parseBaseURL(u); err != nil {
			return fmt.Errorf("--%s: %w", flag, err)
		}
	}
	for flag, d := range map[string]time.Duration{"registry-source-timeout": o.SourceTimeout, "registry-cache-ttl": o.CacheTTL, "registry-stale-ttl": o.StaleTTL} {
		if d < 0 {
			return fmt.Errorf("--%s %s must not be negative", flag, d)
		}
	}
	return nil
}

// Build makes the service; the Smithery key comes from the environment or
// else from the credential service.
func (o *Options) Build(_ context.Context, env service.Env) (service.Service, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	opts := *o
	opts.Prefix, opts.Logger, opts.Replicas = env.Prefix, env.Logger, env.Replicas
	if opts.SmitheryAPIKey == "" {
		opts.SmitheryAPIKey = os.Getenv(EnvSmitheryAPIKey)
	}
	if opts.SmitheryAPIKey == "" && opts.Credentials == nil {
		res, err := credclient.NewResolver(env.Conn, env.Prefix, credclient.ForRegistry())
		if err != nil {
			return nil, err
		}
		opts.Credentials = res
	}
	return New(env.Conn, opts)
}
