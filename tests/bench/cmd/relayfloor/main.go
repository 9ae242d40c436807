// Command relayfloor is the floor of a Streamable HTTP proxy's call path, for
// the gateway benchmarks: the least any proxy of a stdio MCP server does per
// tools/call, with nothing else in it (no auth, no validation, no session
// bookkeeping of its own, no events).
//
// It spawns the server over stdio, initializes it and lists its tools once.
// go-sdk's Streamable HTTP handlers serve everything but a tool call: the
// stateful one a client of 2025-11-25 (initialize, a session id), the
// stateless one a client of 2026-07-28. A tools/call POST (with a session id,
// or of 2026-07-28) is decoded with go-sdk's codec, its name and arguments
// written to the server's stdin as one JSON-RPC request, and the server's
// result bytes answered as the POST's application/json body, never decoded
// (a 2026-07-28 client gets resultType "complete", as go-sdk's server adds it).
//
// With -js dir, each call also leaves a durable record, as mcpbus's call
// events and audit records do: one message in each of two JetStream file
// streams (1 GiB each) of an embedded nats-server storing in dir. It is the
// memory floor of a design that keeps such records.
//
// With -nats url, a tool call goes instead as one NATS request to mcpbus's
// runner (natsrelay.go): the floor of an HTTP edge in front of the NATS path.
// The server it spawns still serves the handshake's tools/list.
//
//	relayfloor [-listen 127.0.0.1:0] [-js dir] [-nats url -nkey seed -inbox-prefix p -call-prefix p] <server command> [args...]
//
// It prints its endpoint URL (http://<addr>/mcp) on stdout once it serves,
// and stops on SIGINT or SIGTERM.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/tests/bench/internal/httpserve"
)

// modern is the first protocol version without sessions.
const modern = "2026-07-28"

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to serve Streamable HTTP on")
	jsDir := flag.String("js", "", "keep a record of each call in two JetStream file streams stored in this directory")
	natsURL := flag.String("nats", "", "relay tool calls as NATS requests to this server instead of the spawned server's stdio")
	seed := flag.String("nkey", "", "with -nats: the nkey seed file to connect with")
	inbox := flag.String("inbox-prefix", "", "with -nats: the inbox prefix its identity may use")
	callPrefix := flag.String("call-prefix", "", "with -nats: the subject of a tool call, less the tool's name")
	flag.Parse()
	if flag.NArg() < 1 {
		fmt.Fprintln(os.Stderr, "usage: relayfloor [-listen addr] <server command> [args...]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var nr *natsRelay
	if *natsURL != "" {
		var err error
		if nr, err = startNATSRelay(*natsURL, *seed, *inbox, *callPrefix); err != nil {
			log.Fatal(err)
		}
		defer nr.close()
	}
	if err := run(ctx, *listen, *jsDir, nr, flag.Arg(0), flag.Args()[1:]); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, listen, jsDir string, nr *natsRelay, command string, args []string) error {
	up, err := startPipe(ctx, command, args)
	if err != nil {
		return err
	}
	defer up.close()
	var rec *records
	if jsDir != "" {
		if rec, err = startRecords(ctx, jsDir); err != nil {
			return err
		}
		defer rec.close()
	}
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := up.call(startCtx, "initialize", &mcp.InitializeParams{ProtocolVersion: "2025-11-25",
		ClientInfo: &mcp.Implementation{Name: "relayfloor", Version: "1"}, Capabilities: &mcp.ClientCapabilities{}}); err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	if err := up.notify("notifications/initialized", &mcp.InitializedParams{}); err != nil {
		return err
	}
	raw, err := up.call(startCtx, "tools/list", &mcp.ListToolsParams{})
	if err != nil {
		return fmt.Errorf("tools/list: %w", err)
	}
	var tools mcp.ListToolsResult
	if err := json.Unmarshal(raw, &tools); err != nil {
		return fmt.Errorf("tools/list: %w", err)
	}

	// go-sdk's server: the handshake, lists, and any call not relayed below.
	srv := mcp.NewServer(&mcp.Implementation{Name: "relayfloor", Version: "1"}, nil)
	for _, t := range tools.Tools {
		srv.AddTool(t, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			raw, err := up.call(ctx, "tools/call", callParams{Name: req.Params.Name, Arguments: req.Params.Arguments})
			if err != nil {
				return nil, err
			}
			var res mcp.CallToolResult
			return &res, json.Unmarshal(raw, &res)
		})
	}
	get := func(*http.Request) *mcp.Server { return srv }
	stateful := mcp.NewStreamableHTTPHandler(get, &mcp.StreamableHTTPOptions{JSONResponse: true})
	stateless := mcp.NewStreamableHTTPHandler(get, &mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})

	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		isModern := r.Header.Get("Mcp-Protocol-Version") >= modern
		next := stateful
		if isModern {
			next = stateless
		}
		if nr != nil && r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/invoke/") {
			nr.invoke(w, r)
			return
		}
		if r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		msg, err := jsonrpc.DecodeMessage(body)
		req, ok := msg.(*jsonrpc.Request)
		if err == nil && ok && req.Method == "tools/call" && (isModern || r.Header.Get("Mcp-Session-Id") != "") {
			relay(w, r, up, nr, rec, req, isModern)
			return
		}
		if err == nil && ok && req.Method == "server/discover" {
			next = stateless
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})

	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	return httpserve.Until(ctx, ln, handler)
}

// callParams is what the relay sends the server of a client's tools/call.
type callParams struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// relay answers one tools/call through the server's stdio (through NATS with
// nr), and records it when rec is set.
func relay(w http.ResponseWriter, r *http.Request, up *pipe, nr *natsRelay, rec *records, req *jsonrpc.Request, isModern bool) {
	start := time.Now()
	var p callParams
	if err := json.Unmarshal(req.Params, &p); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	resp := &jsonrpc.Response{ID: req.ID}
	var raw json.RawMessage
	var id int64
	var err error
	if nr != nil {
		raw, err = nr.call(ctx, p.Name, p.Arguments)
	} else {
		raw, id, err = up.callID(ctx, "tools/call", p)
	}
	if rec != nil {
		rec.record(p.Name, id, start, err)
	}
	var we *jsonrpc.Error
	switch {
	case errors.As(err, &we):
		resp.Error = we
	case err != nil:
		resp.Error = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
	case isModern && len(raw) > 1 && raw[0] == '{':
		resp.Result = append([]byte(`{"resultType":"complete",`), raw[1:]...)
	default:
		resp.Result = raw
	}
	data, err := jsonrpc.EncodeMessage(resp)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(data)
}
