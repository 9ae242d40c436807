package client

import (
	"context"
	"sort"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/libs/apierr"
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
	infos, err := gather[micro.Info](ctx, c.nc, "$SRV.INFO."+runnerService, wait)
	if err != nil || len(infos) == 0 {
		return nil // not knowing the policies refuses nothing
	}
	names := make([]string, 0, len(keyfiles))
	for name := range keyfiles {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		var refusal *apierr.Error
		for _, in := range infos {
			p, ok := model.ExecPolicyFromMetadata(in.Metadata)
			if !ok {
				return nil
			}
			e := p.RefuseKeyfilePath(keyfiles[name], in.Metadata["runner"])
			if e == nil {
				refusal = nil
				break
			}
			if refusal == nil {
				refusal = e
			}
		}
		if refusal != nil {
			return refusal.WithField("keyfiles." + name)
		}
	}
	return nil
}
