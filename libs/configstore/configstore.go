// Package configstore reads and writes McpConfig records in the JetStream KV
// bucket mcp_configs (key = config id) and loads server files.
package configstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"sigs.k8s.io/yaml"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/serverfile"
)

// Store is the config bucket.
type Store struct{ KV jetstream.KeyValue }

// List returns every config, in no particular order.
func (s Store) List(ctx context.Context) ([]model.McpConfig, error) {
	lister, err := s.KV.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing configs: %w", err)
	}
	defer func() { _ = lister.Stop() }()
	var out []model.McpConfig
	for key := range lister.Keys() {
		e, err := s.KV.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading config %s: %w", key, err)
		}
		var c model.McpConfig
		if err := json.Unmarshal(e.Value(), &c); err != nil {
			continue
		}
		c.Revision = e.Revision()
		out = append(out, c)
	}
	return out, nil
}

// Upsert validates cfg and writes it; a config with the same slug keeps its
// id and creation time, so loading the same file twice changes nothing else.
func (s Store) Upsert(ctx context.Context, cfg model.McpConfig) (model.McpConfig, error) {
	cfg.Normalize()
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	existing, err := s.List(ctx)
	if err != nil {
		return cfg, err
	}
	now := time.Now().UTC()
	for _, e := range existing {
		if e.Slug == cfg.Slug && (cfg.ID == "" || cfg.ID == e.ID) {
			cfg.ID, cfg.CreatedAt = e.ID, e.CreatedAt
			break
		}
		if e.Slug == cfg.Slug {
			return cfg, apierr.Newf(apierr.Conflict, "slug %s is already used by config %s", cfg.Slug, e.ID).WithField("slug")
		}
	}
	if cfg.ID == "" {
		cfg.ID = uuid.NewString()
	} else if _, err := uuid.Parse(cfg.ID); err != nil {
		return cfg, apierr.Invalid("id", "id must be a uuid")
	}
	if cfg.CreatedAt.IsZero() {
		cfg.CreatedAt = now
	}
	cfg.UpdatedAt = now
	cfg.Revision = 0
	data, err := json.Marshal(cfg)
	if err != nil {
		return cfg, fmt.Errorf("encoding config: %w", err)
	}
	rev, err := s.KV.Put(ctx, cfg.ID, data)
	if err != nil {
		return cfg, apierr.Wrap(apierr.ServiceUnavailable, "storing config", err)
	}
	cfg.Revision = rev
	return cfg, nil
}

// LoadFile reads a JSON or YAML file {"servers": [McpConfig, …]}.
func LoadFile(path string) ([]model.McpConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return Parse(data)
}

// Parse decodes a servers file (YAML is a superset of JSON, so both work).
// Unknown fields are errors: a typo should not silently drop a setting.
func Parse(data []byte) ([]model.McpConfig, error) {
	var f model.ServersFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, apierr.Wrap(apierr.Validation, "servers file: "+serverfile.YAMLMessage(data, err), err)
	}
	if m := serverfile.KeyCollision(data); m != "" {
		return nil, apierr.New(apierr.Validation, "servers file: "+m)
	}
	for i := range f.Servers {
		f.Servers[i].Normalize()
		if err := f.Servers[i].Validate(); err != nil {
			return nil, apierr.Invalid(fmt.Sprintf("servers[%d].%s", i, err.Field), err.Message)
		}
	}
	return f.Servers, nil
}
