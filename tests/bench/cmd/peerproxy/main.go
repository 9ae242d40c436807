// Command peerproxy is the peer reference of mcpbus's gateway benchmarks: the
// most common shape of a Go MCP proxy, built on github.com/mark3labs/mcp-go.
// It spawns an MCP server over stdio (mcp-go's stdio client), lists its tools
// once at start and serves each of them on a stateless Streamable HTTP
// endpoint (mcp-go's server), forwarding every call to the stdio client and
// its result back as mcp-go returns it. No auth, no validation of its own.
//
// With -session it serves Streamable HTTP in mcp-go's default mode, the way
// the popular Go proxies run it: initialize hands each client a session
// (an Mcp-Session-Id the client sends with every later request).
//
//	peerproxy [-listen 127.0.0.1:0] [-session] <server command> [args...]
//
// It prints its endpoint URL (http://<addr>/mcp) on stdout once it serves,
// and stops on SIGINT or SIGTERM.
//
// With -bus it is the floor of mcpbus's design: the same proxy with one NATS
// request/reply between its HTTP side and its stdio client, through an
// embedded nats-server and in-process connections (as in mcpbus up), and
// nothing else: no auth, no validation, no telemetry.
//
// With -nats host:port it is the floor of a bus caller: no HTTP; an embedded
// nats-server listening there and a responder connected in process that
// forwards the tools/call params of each request on subject "call" to the
// stdio client and answers the encoded result. It prints nats://<addr>.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/mcpbus/mcpbus/tests/bench/internal/httpserve"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to serve Streamable HTTP on")
	viaBus := flag.Bool("bus", false, "forward every call through an in-process NATS request/reply")
	natsListen := flag.String("nats", "", "serve calls on NATS at this host:port instead of HTTP")
	session := flag.Bool("session", false, "serve Streamable HTTP with a session per client (mcp-go's default) instead of stateless")
	flag.Parse()
	if flag.NArg() < 1 {
		fmt.Fprintln(os.Stderr, "usage: peerproxy [-listen addr] [-session] [-bus | -nats addr] <server command> [args...]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *listen, *viaBus, *session, *natsListen, flag.Arg(0), flag.Args()[1:]); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, listen string, viaBus, session bool, natsListen, command string, args []string) error {
	up, err := client.NewStdioMCPClient(command, nil, args...)
	if err != nil {
		return fmt.Errorf("starting %s: %w", command, err)
	}
	defer up.Close()
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var init mcp.InitializeRequest
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "peerproxy", Version: "1"}
	if _, err := up.Initialize(startCtx, init); err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	tools, err := up.ListTools(startCtx, mcp.ListToolsRequest{})
	if err != nil {
		return fmt.Errorf("tools/list: %w", err)
	}

	srv := server.NewMCPServer("peerproxy", "1", server.WithToolCapabilities(false))
	forward := func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return up.CallTool(ctx, mcp.CallToolRequest{Params: req.Params})
	}
	if natsListen != "" {
		return serveBus(ctx, natsListen, forward)
	}
	if viaBus {
		stop, err := busHop(&forward)
		if err != nil {
			return err
		}
		defer stop()
	}
	for _, t := range tools.Tools {
		srv.AddTool(t, forward)
	}

	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	// WithStateLess(false) leaves mcp-go's default session manager in place.
	return httpserve.Until(ctx, ln, server.NewStreamableHTTPServer(srv, server.WithStateLess(!session)))
}
