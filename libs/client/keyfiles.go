package client

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// CheckKeyfiles refuses the keyfile paths of secrets about to be stored
// (`cred set --keyfile`, PUT /api/v1/servers/{id}/credentials) that every
// runner answering discovery refuses by the exec policy it publishes
// (--keyfile-prefixes): such a path could never reach the server, as the
// config service refuses it in a config's keyfile_path. VALIDATION_ERROR on
// keyfiles.<NAME>, with the runner's reason. With no runner answering within
// wait, or one publishing no policy (it launches everything), nothing is
// refused: the runner checks again at spawn.
func (c *Client) CheckKeyfiles(ctx context.Context, keyfiles map[string]string, wait time.Duration) error {
	if len(keyfiles) == 0 {
		return nil
	}
	if wait <= 0 {
		wait = 300 * time.Millisecond
	}
	infos, err := bus.Gather[micro.Info](ctx, c.nc, "$SRV.INFO."+runnerService, wait, 0)
	if err != nil || len(infos) == 0 {
		return nil // not knowing the policies refuses nothing
	}
	policies := make([]model.RunnerPolicy, 0, len(infos))
	for _, in := range infos {
		policies = append(policies, model.RunnerPolicyOf(in.Metadata))
	}
	for _, name := range slices.Sorted(maps.Keys(keyfiles)) {
		refusal := model.RefusedByEvery(policies, func(p model.ExecPolicy, runner string) *apierr.Error {
			return p.RefuseKeyfilePath(keyfiles[name], runner)
		})
		if refusal != nil {
			return refusal.WithField("keyfiles." + name)
		}
	}
	return nil
}
