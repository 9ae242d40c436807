package client

import (
	"context"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// The gateway's approvals of tool calls (mcp.v1.approvals.*, served by any
// gateway instance): the calls its rules hold and the rules themselves.

// Approvals lists the held calls the caller may decide (the operator: all).
func (c *Client) Approvals(ctx context.Context) ([]model.HeldCall, error) {
	var out model.ApprovalsListReply
	err := bus.RequestJSON(ctx, c.nc, c.subj.Service("approvals", "list"), struct{}{}, &out, c.timeout)
	return out.Calls, err
}

// DecideApproval approves or denies a held call and returns its record.
func (c *Client) DecideApproval(ctx context.Context, req model.ApprovalDecideRequest) (model.HeldCall, error) {
	var out model.HeldCall
	err := bus.RequestJSON(ctx, c.nc, c.subj.Service("approvals", "decide"), req, &out, c.timeout)
	return out, err
}

// ApprovalRules reads the approval rules in force.
func (c *Client) ApprovalRules(ctx context.Context) (model.ApprovalRules, error) {
	var out model.ApprovalRules
	err := bus.RequestJSON(ctx, c.nc, c.subj.Service("approvals", "rules-get"), struct{}{}, &out, c.timeout)
	return out, err
}

// SetApprovalRules replaces the approval rules (validated by the gateway).
func (c *Client) SetApprovalRules(ctx context.Context, r model.ApprovalRules) (model.ApprovalRules, error) {
	var out model.ApprovalRules
	err := bus.RequestJSON(ctx, c.nc, c.subj.Service("approvals", "rules-put"), r, &out, c.timeout)
	return out, err
}
