package mcpserver

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// initGate is a transport whose connection answers a request made before
// `initialize` itself, with -32600 (invalid request) as the HTTP endpoint
// does: go-sdk answers it with code 0, which clients cannot tell from a
// server error. Requests of protocol 2026-07-28 (server/discover, or a
// _meta naming the version) need no initialize and pass, as do ping and
// notifications.
type initGate struct{ mcp.Transport }

func (g initGate) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := g.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &gatedConn{Connection: c}, nil
}

type gatedConn struct {
	mcp.Connection
	initialized atomic.Bool
}

func (c *gatedConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		msg, err := c.Connection.Read(ctx)
		if err != nil {
			return msg, err
		}
		req, ok := msg.(*jsonrpc.Request)
		if !ok || !req.IsCall() || c.initialized.Load() {
			return msg, nil
		}
		switch {
		case req.Method == "initialize":
			c.initialized.Store(true)
			return msg, nil
		case req.Method == "ping" || req.Method == "server/discover" || bytes.Contains(req.Params, []byte(mcp.MetaKeyProtocolVersion)):
			return msg, nil
		}
		refusal := &jsonrpc.Response{ID: req.ID, Error: &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest,
			Message: fmt.Sprintf("%q before initialize: send initialize first", req.Method)}}
		if err := c.Connection.Write(ctx, refusal); err != nil {
			return nil, err
		}
	}
}
