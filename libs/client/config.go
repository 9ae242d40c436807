package client

import (
	"context"
	"time"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/model"
)

// configTimeout bounds config requests; enable waits for the server to start.
const (
	configTimeout = 15 * time.Second
	enableTimeout = 3 * time.Minute
)

func (c *Client) config(ctx context.Context, verb string, in, out any, timeout time.Duration) error {
	return bus.RequestJSON(ctx, c.nc, c.subj.Service("config", verb), in, out, timeout)
}

// CreateConfig adds a server; secrets go to the credential service. Secret
// values (secrets, and those left in cfg: env vars marked or named secret,
// secret headers) are taken out of the config and sealed to the credential
// service's key: the request carries sealed_secrets, never a value in clear.
func (c *Client) CreateConfig(ctx context.Context, cfg model.McpConfig, secrets *model.Credentials) (model.McpConfig, error) {
	var out model.McpConfig
	err := c.sealing(func() error {
		cfg := cfg
		sealed, err := c.sealer().SealConfig(ctx, &cfg, secrets)
		if err != nil {
			return err
		}
		return c.config(ctx, "create", model.ConfigCreateRequest{Config: cfg, SealedSecrets: sealed}, &out, configTimeout)
	})
	return out, err
}

// sealer is the client's credential sealer, made on first use.
func (c *Client) sealer() *credclient.Sealer {
	c.sealOnce.Do(func() { c.seal = credclient.NewSealer(c.nc, c.subj.Prefix) })
	return c.seal
}

// sealing runs send, and once more with the credential service's key asked
// again when the service could not open what was sealed (its key changed).
func (c *Client) sealing(send func() error) error {
	err := send()
	if credclient.StaleKey(err) {
		c.sealer().Forget()
		err = send()
	}
	return err
}

// GetConfig returns one config by slug or id.
func (c *Client) GetConfig(ctx context.Context, server string) (model.McpConfig, error) {
	var out model.McpConfig
	err := c.config(ctx, "get", model.ConfigRef{Server: server}, &out, configTimeout)
	return out, err
}

// ListConfigs returns every config, by slug.
func (c *Client) ListConfigs(ctx context.Context) ([]model.McpConfig, error) {
	var out model.ConfigListReply
	err := c.config(ctx, "list", struct{}{}, &out, configTimeout)
	return out.Configs, err
}

// UpdateConfig replaces a config; a non-zero Revision must be the current one.
// Secrets are sealed as in CreateConfig.
func (c *Client) UpdateConfig(ctx context.Context, cfg model.McpConfig, secrets *model.Credentials) (model.McpConfig, error) {
	var out model.McpConfig
	err := c.sealing(func() error {
		cfg := cfg
		sealed, err := c.sealer().SealConfig(ctx, &cfg, secrets)
		if err != nil {
			return err
		}
		return c.config(ctx, "update", model.ConfigUpdateRequest{Config: cfg, SealedSecrets: sealed}, &out, configTimeout)
	})
	return out, err
}

// DeleteConfig removes a server, its secrets, status and catalog.
func (c *Client) DeleteConfig(ctx context.Context, server string) (model.ConfigDeleteReply, error) {
	var out model.ConfigDeleteReply
	err := c.config(ctx, "delete", model.ConfigRef{Server: server}, &out, configTimeout)
	return out, err
}

// SetEnabled enables (and starts; reverted if the start fails) or disables a server.
func (c *Client) SetEnabled(ctx context.Context, server string, enabled bool) (model.McpConfig, error) {
	verb, timeout := "disable", configTimeout
	if enabled {
		verb, timeout = "enable", enableTimeout
	}
	var out model.McpConfig
	err := c.config(ctx, verb, model.ConfigRef{Server: server}, &out, timeout)
	return out, err
}

// ImportConfigs imports a servers file in any supported format. The file is
// parsed here (Vars resolve its ${VAR} references): the request carries the
// parsed servers with their secrets sealed to the credential service's key,
// never the content, the variables or a secret value in clear.
func (c *Client) ImportConfigs(ctx context.Context, req model.ConfigImportRequest) (model.ConfigImportReply, error) {
	var out model.ConfigImportReply
	err := c.sealing(func() error {
		sealed, err := c.sealer().SealImport(ctx, req)
		if err != nil {
			return err
		}
		return c.config(ctx, "import", sealed, &out, time.Minute)
	})
	return out, err
}

// ExportConfigs renders configs in a format; secrets appear only as ${VAR}.
func (c *Client) ExportConfigs(ctx context.Context, req model.ConfigExportRequest) (model.ConfigExportReply, error) {
	var out model.ConfigExportReply
	err := c.config(ctx, "export", req, &out, configTimeout)
	return out, err
}

// ConfigHistory returns the stored revisions of a config, oldest first.
func (c *Client) ConfigHistory(ctx context.Context, server string) ([]model.ConfigRevision, error) {
	var out model.ConfigHistoryReply
	err := c.config(ctx, "history", model.ConfigRef{Server: server}, &out, configTimeout)
	return out.Revisions, err
}

// RollbackConfig makes a config what it was at revision.
func (c *Client) RollbackConfig(ctx context.Context, req model.ConfigRollbackRequest) (model.McpConfig, error) {
	var out model.McpConfig
	err := c.config(ctx, "rollback", req, &out, configTimeout)
	return out, err
}
