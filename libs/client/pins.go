package client

import (
	"context"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// ToolsReview lists the tools whose definition changed since it was pinned,
// of server (slug) or of all servers when it is empty.
func (c *Client) ToolsReview(ctx context.Context, server string) ([]model.ToolPin, error) {
	var out model.ToolsReviewReply
	if err := bus.RequestJSON(ctx, c.nc, c.subj.ToolsReview(), model.ToolsReviewRequest{Server: server}, &out, c.timeout); err != nil {
		return nil, err
	}
	return out.Changes, nil
}

// ToolsApprove pins (or with req.Reject, drops) the pending definition of a
// tool, named by its hash, and returns the pin as it now is.
func (c *Client) ToolsApprove(ctx context.Context, req model.ToolsApproveRequest) (model.ToolPin, error) {
	var out model.ToolPin
	err := bus.RequestJSON(ctx, c.nc, c.subj.ToolsApprove(), req, &out, c.timeout)
	return out, err
}
