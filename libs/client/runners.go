package client

import (
	"context"
	"sort"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
)

// Runner is one runner instance and its load, from NATS micro discovery.
type Runner struct {
	ID      string   `json:"id"`
	Version string   `json:"version"`
	Servers []string `json:"servers"`
	Calls   int      `json:"calls"`
	Errors  int      `json:"errors"`
}

// runnerService is the micro name runners register (see services/runner).
const runnerService = "mcpbus-runner"

// Runners lists the live runner instances (each answers $SRV.INFO) with the
// servers they own and their calls and errors, from the servers' status.
func (c *Client) Runners(ctx context.Context, wait time.Duration) ([]Runner, error) {
	if wait <= 0 {
		wait = 300 * time.Millisecond
	}
	infos, err := bus.Gather[micro.Info](ctx, c.nc, "$SRV.INFO."+runnerService, wait, 0)
	if err != nil {
		return nil, apierr.Wrap(apierr.Network, "discovery: "+err.Error(), err)
	}
	statuses, err := c.Status(ctx)
	if err != nil {
		return nil, err
	}
	byID := map[string]*Runner{}
	for _, in := range infos {
		id := in.Metadata["runner"]
		byID[id] = &Runner{ID: id, Version: in.Version, Servers: []string{}}
	}
	for _, st := range statuses {
		r := byID[st.Runner]
		if r == nil || st.State == "disabled" || st.State == "stopped" {
			continue
		}
		r.Servers = append(r.Servers, st.Server)
		r.Calls += int(st.Calls)
		r.Errors += int(st.Errors)
	}
	out := make([]Runner, 0, len(byID))
	for _, r := range byID {
		sort.Strings(r.Servers)
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}
