package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// NoRunner reports whether err says no runner answered a runtime request:
// the moment an operator most needs the stored states (StoredStatus).
func NoRunner(err error) bool {
	return apierr.Of(err) == apierr.ServiceUnavailable && strings.Contains(err.Error(), "no service is answering")
}

// StoredStatus is the last status of every server (or of server) as KV
// mcp_status holds it, for when no runner answers runtime.status. Each is
// marked as such in its message: no runner vouches for it now.
func (c *Client) StoredStatus(ctx context.Context, server string) ([]model.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	js, err := jetstream.New(c.nc)
	if err != nil {
		return nil, apierr.Wrap(apierr.Internal, "jetstream", err)
	}
	kv, err := bus.BindKV(ctx, js, bus.BucketStatus)
	if err != nil {
		return nil, bus.JetStreamErr("the status bucket", err)
	}
	keys := []string{server}
	if server == "" {
		if keys, err = kv.Keys(ctx); errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, nil
		} else if err != nil {
			return nil, bus.JetStreamErr("the stored states", err)
		}
		slices.Sort(keys)
	}
	var out []model.Status
	for _, k := range keys {
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			if server != "" {
				return nil, apierr.Newf(apierr.NotFound, "no stored state of server %s", server)
			}
			continue
		}
		if err != nil {
			return nil, bus.JetStreamErr("the stored state of "+k, err)
		}
		var st model.Status
		if err := json.Unmarshal(e.Value(), &st); err != nil {
			continue // not a status: left out, as a runner's cache would
		}
		note := fmt.Sprintf("no runner answers: last stored %s ago", time.Since(st.UpdatedAt).Round(time.Second))
		st.Message = strings.TrimSuffix(note+"; "+st.Message, "; ")
		out = append(out, st)
	}
	return out, nil
}
