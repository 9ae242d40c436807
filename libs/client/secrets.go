package client

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// ApplySecrets restarts server (slug or id) after its secrets changed, so
// that it runs with them: a running server keeps the environment it started
// with, and a starting one may have resolved the old values already (the
// runner queues the restart behind the start: it comes up, then restarts
// with the new ones). Every replica that is running, starting or in error
// restarts (runtime.restart with if_running, model.NeedsRestartForSecrets):
// one in error, whose upstream refused its key or that gave up restarting,
// is started again by nothing else, and new secrets are what it waits for.
// An idle or stopped one takes them at its next start. It reports whether a
// replica restarted.
func (c *Client) ApplySecrets(ctx context.Context, server string) (bool, error) {
	// The status of one replica tells whether a runner holds the server
	// (and it is enabled); which replicas run is theirs to check.
	if st, err := c.Runtime(ctx, "status", server); err != nil || st.State == model.StateDisabled {
		return false, nil // no runner holds it: nothing to apply
	}
	var st model.Status
	err := bus.RequestJSON(ctx, c.nc, c.subj.Runtime("restart"), model.RuntimeRequest{Server: server, IfRunning: true}, &st, 2*time.Minute)
	if apierr.Of(err) == apierr.Validation && strings.Contains(err.Error(), "if_running") {
		// A runner of an older build, which knows no if_running, restarts
		// the one replica its control subject reaches, as it did before.
		st, err = c.Runtime(ctx, "restart", server)
	}
	if err != nil {
		return false, fmt.Errorf("secrets stored, but restarting %s to use them failed: %w", server, err)
	}
	return st.State == model.StateRunning || st.State == model.StateStarting, nil
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
