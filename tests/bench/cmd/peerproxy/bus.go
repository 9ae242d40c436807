package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

type forwarder = func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error)

// callSubject is the subject the responder serves tools/call params on.
const callSubject = "call"

// natsServer starts an embedded nats-server for in-process connections and,
// when listen is a host:port, for TCP clients too.
func natsServer(listen string) (*server.Server, error) {
	opts := &server.Options{DontListen: true, NoLog: true, NoSigs: true}
	if listen != "" {
		host, port, err := net.SplitHostPort(listen)
		if err != nil {
			return nil, fmt.Errorf("nats listen address: %w", err)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, fmt.Errorf("nats listen port: %w", err)
		}
		if p == 0 {
			p = server.RANDOM_PORT
		}
		opts.DontListen, opts.Host, opts.Port = false, host, p
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("nats server: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("nats server did not start")
	}
	return ns, nil
}

func inProcess(ns *server.Server) (*nats.Conn, error) {
	return nats.Connect("", nats.InProcessServer(ns))
}

// serveCalls answers every request on callSubject: it calls direct with the
// request's params and answers the encoded result.
func serveCalls(resp *nats.Conn, direct forwarder) error {
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
	_, err := resp.Subscribe(callSubject, func(m *nats.Msg) { go answer(m) })
	return err
}

// busHop puts one NATS request/reply in front of *fwd: a responder calls the
// original forwarder with the request's params and answers the encoded
// result; *fwd becomes the requester. It returns the function that stops the
// server.
func busHop(fwd *forwarder) (stop func(), err error) {
	ns, err := natsServer("")
	if err != nil {
		return nil, err
	}
	resp, err := inProcess(ns)
	if err != nil {
		ns.Shutdown()
		return nil, err
	}
	req, err := inProcess(ns)
	if err != nil {
		resp.Close()
		ns.Shutdown()
		return nil, err
	}
	stop = func() { req.Close(); resp.Close(); ns.Shutdown() }
	if err := serveCalls(resp, *fwd); err != nil {
		stop()
		return nil, err
	}
	*fwd = func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		data, err := json.Marshal(r.Params)
		if err != nil {
			return nil, err
		}
		msg, err := req.RequestWithContext(ctx, callSubject, data)
		if err != nil {
			return nil, err
		}
		raw := json.RawMessage(msg.Data)
		return mcp.ParseCallToolResult(&raw)
	}
	return stop, nil
}

// serveBus is the floor of the bus path with a TCP caller: an embedded
// nats-server listening on listen and a responder connected in process (as
// the runner is in mcpbus up) forwarding to direct; no HTTP. It prints the
// server's URL and serves until ctx ends.
func serveBus(ctx context.Context, listen string, direct forwarder) error {
	ns, err := natsServer(listen)
	if err != nil {
		return err
	}
	defer ns.Shutdown()
	resp, err := inProcess(ns)
	if err != nil {
		return err
	}
	defer resp.Close()
	if err := serveCalls(resp, direct); err != nil {
		return err
	}
	fmt.Println(ns.ClientURL())
	<-ctx.Done()
	return nil
}
