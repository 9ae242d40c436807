package client

import (
	"context"
	"fmt"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// ApplySecrets restarts server (slug or id) after its secrets changed, so
// that it runs with them: a running server keeps the environment it started
// with, and a starting one may have resolved the old values already (the
// runner queues the restart behind the start: it comes up, then restarts
// with the new ones). A server in error is restarted too: one whose upstream
// refused its key, or that gave up restarting, is not started again by itself,
// and new secrets are what it waits for. A server that is idle or stopped
// takes them at its next start. It reports whether a restart was asked for.
func (c *Client) ApplySecrets(ctx context.Context, server string) (bool, error) {
	st, err := c.Runtime(ctx, "status", server)
	if err != nil || (st.State != model.StateRunning && st.State != model.StateStarting && st.State != model.StateError) {
		return false, nil // no runner holds it running: nothing to apply
	}
	if _, err := c.Runtime(ctx, "restart", server); err != nil {
		return false, fmt.Errorf("secrets stored, but restarting %s to use them failed: %w", server, err)
	}
	return true, nil
}

// ApplyPrincipalSecrets closes principal's upstream session of server (slug)
// after their own credentials changed or were revoked: the next call opens
// one with what is stored now (or answers UNAUTHORIZED). A server no runner
// holds has no session to close.
func (c *Client) ApplyPrincipalSecrets(ctx context.Context, server, principal string) error {
	var st model.Status
	err := bus.RequestJSON(ctx, c.nc, c.subj.Runtime("forget"), model.RuntimeRequest{Server: server, Principal: principal}, &st, c.timeout)
	if apierr.Of(err) == apierr.ServiceUnavailable {
		return nil // no runner owns it: no session is open
	}
	return err
}
