package mcpserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// initGate is a transport whose connection answers a request made before
// `initialize` itself, with -32600 (invalid request) as the HTTP endpoint
// does: go-sdk answers it with code 0, which clients cannot tell from a
// server error. Requests of protocol 2026-07-28 (server/discover, or a
// _meta naming the version) need no initialize and pass, as do ping and
// notifications. go-sdk's code 0 for a second initialize becomes -32600 too.
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

	mu    sync.Mutex
	inits map[jsonrpc.ID]bool // the initialize requests not answered yet
}

func (c *gatedConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		msg, err := c.Connection.Read(ctx)
		if err != nil {
			return msg, err
		}
		req, ok := msg.(*jsonrpc.Request)
		if ok && req.IsCall() && req.Method == "initialize" {
			c.mu.Lock()
			if c.inits == nil {
				c.inits = map[jsonrpc.ID]bool{}
			}
			c.inits[req.ID] = true
			c.mu.Unlock()
		}
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

// Write gives go-sdk's answer to a second initialize (a plain error, code
// 0: "duplicate initialize") code -32600.
func (c *gatedConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if resp, ok := msg.(*jsonrpc.Response); ok {
		c.mu.Lock()
		init := c.inits[resp.ID]
		delete(c.inits, resp.ID)
		c.mu.Unlock()
		var werr *jsonrpc.Error
		if init && resp.Error != nil && (!errors.As(resp.Error, &werr) || werr.Code == 0) {
			msg = &jsonrpc.Response{ID: resp.ID, Error: &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest,
				Message: "Invalid Request: " + resp.Error.Error() + ": this session is initialized already"}}
		}
	}
	return c.Connection.Write(ctx, msg)
}
