package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

type forwarder = func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error)

// busHop puts one NATS request/reply in front of *fwd: a responder calls the
// original forwarder with the request's params and answers the encoded
// result; *fwd becomes the requester. It returns the function that stops the
// server.
func busHop(fwd *forwarder) (stop func(), err error) {
	ns, err := server.NewServer(&server.Options{DontListen: true, NoLog: true, NoSigs: true})
	if err != nil {
		return nil, fmt.Errorf("nats server: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		return nil, fmt.Errorf("nats server did not start")
	}
	dial := func() (*nats.Conn, error) { return nats.Connect("", nats.InProcessServer(ns)) }
	resp, err := dial()
	if err != nil {
		ns.Shutdown()
		return nil, err
	}
	req, err := dial()
	if err != nil {
		resp.Close()
		ns.Shutdown()
		return nil, err
	}
	stop = func() { req.Close(); resp.Close(); ns.Shutdown() }
	direct := *fwd
	answer := func(m *nats.Msg) {
		var p mcp.CallToolParams
		var out []byte
		if err := json.Unmarshal(m.Data, &p); err != nil {
			out, _ = json.Marshal(mcp.NewToolResultError(err.Error()))
		} else if res, err := direct(context.Background(), mcp.CallToolRequest{Params: p}); err != nil {
			out, _ = json.Marshal(mcp.NewToolResultError(err.Error()))
		} else {
			out, _ = json.Marshal(res)
		}
		_ = m.Respond(out)
	}
	// Each call in a goroutine of its own, as the runner serves them: a
	// subscription's handler runs one message at a time.
	_, err = resp.Subscribe("call", func(m *nats.Msg) { go answer(m) })
	if err != nil {
		stop()
		return nil, err
	}
	*fwd = func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		data, err := json.Marshal(r.Params)
		if err != nil {
			return nil, err
		}
		msg, err := req.RequestWithContext(ctx, "call", data)
		if err != nil {
			return nil, err
		}
		raw := json.RawMessage(msg.Data)
		return mcp.ParseCallToolResult(&raw)
	}
	return stop, nil
}
