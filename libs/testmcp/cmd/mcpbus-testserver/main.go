// Command mcpbus-testserver serves the testmcp server over stdio (default) or
// Streamable HTTP (-http addr), for mcpbus tests and benchmarks.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/telemetry"
	"github.com/mcpbus/mcpbus/libs/testmcp"
)

func main() {
	httpAddr := flag.String("http", "", "serve Streamable HTTP on this address instead of stdio (prints the URL)")
	name := flag.String("name", "mcpbus-testserver", "server name reported in the handshake")
	token := flag.String("token", "", "with -http: require this bearer token")
	hang := flag.Bool("hang", false, "never answer the handshake (tests handshake timeouts)")
	jsonResp := flag.Bool("json", false, "with -http: answer calls with application/json instead of an SSE stream")
	stateless := flag.Bool("stateless", false, "with -http: stateless (no session ids; clients speak protocol 2026-07-28)")
	protocols := flag.String("protocols", "", "comma-separated protocol versions to negotiate (default: go-sdk's; e.g. 2025-11-25 for a server of the initialize era)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *hang {
		<-ctx.Done()
		return
	}
	if f := os.Getenv("TESTMCP_START_LOG"); f != "" {
		// One line per start: tests count spawns.
		if lf, err := os.OpenFile(f, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
			fmt.Fprintln(lf, os.Getpid())
			_ = lf.Close()
		}
	}
	if names := os.Getenv("TESTMCP_PRINT_ENV"); names != "" {
		// TESTMCP_PRINT_ENV=A,B: one stderr line per variable, its value inside
		// a longer line (tests check that the runner redacts secrets it logs).
		for _, n := range strings.Split(names, ",") {
			fmt.Fprintf(os.Stderr, "testserver env %s=%s (printed at start)\n", n, os.Getenv(n))
		}
	}
	// TESTMCP_TRY_READ=A,B: first try to read each path or glob (a hostile server
	// after the runner's secrets); the start_reads tool reports what came of it.
	probe := tryReads(os.Getenv("TESTMCP_TRY_READ"))
	if v := os.Getenv("TESTMCP_FAIL_START"); v != "" {
		fmt.Fprintln(os.Stderr, "failing at start:", v)
		os.Exit(2)
	}
	var opts *mcp.ServerOptions
	if *protocols != "" {
		opts = &mcp.ServerOptions{SupportedProtocolVersions: strings.Split(*protocols, ",")}
	}
	srv := testmcp.NewServerOpts(*name, opts)
	mcp.AddTool(srv, &mcp.Tool{Name: "start_reads", Description: "What the TESTMCP_TRY_READ reads at start got, this process's uid, and whether TMPDIR is writable"},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			b, err := json.Marshal(probe)
			if err != nil {
				return nil, nil, err
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}}, nil, nil
		})
	if telemetry.Enabled() { // OTEL_EXPORTER_OTLP_ENDPOINT set: an instrumented server
		shutdown, err := telemetry.Setup(ctx, *name, "1.0.0")
		if err != nil {
			log.Fatal(err)
		}
		defer func() { _ = shutdown(context.Background()) }()
		testmcp.Traced(srv)
	}
	if *httpAddr == "" {
		if err := srv.Run(ctx, &mcp.StdioTransport{}); err != nil && ctx.Err() == nil {
			log.Fatal(err)
		}
		return
	}
	ln, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("http://%s/mcp\n", ln.Addr())
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{JSONResponse: *jsonResp, Stateless: *stateless})
	mux := http.NewServeMux()
	mux.Handle("/mcp", testmcp.RequireBearer(*token, h))
	hs := &http.Server{Handler: mux}
	go func() { <-ctx.Done(); _ = hs.Close() }()
	if err := hs.Serve(ln); err != nil && err != http.ErrServerClosed {
		log.Fatal(err)
	}
}

// StartReads is what the start_reads tool returns.
type StartReads struct {
	UID int `json:"uid"`
	// Reads maps each path to "read <n> bytes" or the error.
	Reads map[string]string `json:"reads"`
	// TmpWrite is "ok" or the error of writing a file into TMPDIR.
	TmpWrite string `json:"tmp_write"`
}

func tryReads(list string) StartReads {
	r := StartReads{UID: os.Getuid(), Reads: map[string]string{}}
	if list != "" {
		for _, p := range strings.Split(list, ",") {
			paths := []string{p}
			if strings.Contains(p, "*") { // a glob: every match (/proc/<pid>/task/*/environ)
				paths, _ = filepath.Glob(p)
			}
			for _, p := range paths {
				if p == "" {
					continue
				}
				if b, err := os.ReadFile(p); err != nil {
					r.Reads[p] = err.Error()
				} else {
					r.Reads[p] = fmt.Sprintf("read %d bytes", len(b))
				}
			}
		}
	}
	r.TmpWrite = "ok"
	if f, err := os.CreateTemp("", "probe"); err != nil {
		r.TmpWrite = err.Error()
	} else {
		_ = f.Close()
		_ = os.Remove(f.Name())
	}
	return r
}
