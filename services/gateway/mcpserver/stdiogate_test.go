package mcpserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/services/gateway/mcpserver"
)

// Over stdio, a request before initialize gets -32600 (as on HTTP), not
// go-sdk's code 0; ping needs no initialize; after initialize requests pass.
func TestStdioRequestBeforeInitialize(t *testing.T) {
	e := start(t, mcpserver.Options{}, nil)
	c2sR, c2sW := io.Pipe()
	s2cR, s2cW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = e.agg.Serve(ctx, nil, &mcp.IOTransport{Reader: c2sR, Writer: s2cW}) }()
	defer c2sW.Close()
	lines := bufio.NewScanner(s2cR)
	ask := func(line string) (code int64, result json.RawMessage) {
		t.Helper()
		done := make(chan struct{})
		go func() {
			defer close(done)
			if _, err := io.WriteString(c2sW, line+"\n"); err != nil {
				t.Errorf("write: %v", err)
			}
		}()
		got := make(chan bool, 1)
		go func() { got <- lines.Scan() }()
		select {
		case ok := <-got:
			if !ok {
				t.Fatalf("no answer to %s: %v", line, lines.Err())
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no answer to %s within 10s", line)
		}
		<-done
		var resp struct {
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Code int64 `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(lines.Bytes(), &resp); err != nil {
			t.Fatalf("answer %s: %v", lines.Bytes(), err)
		}
		if resp.Error != nil {
			return resp.Error.Code, nil
		}
		return 0, resp.Result
	}
	if code, _ := ask(`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`); code != -32600 {
		t.Fatalf("tools/list before initialize: code %d, want -32600", code)
	}
	if code, res := ask(`{"jsonrpc":"2.0","id":2,"method":"ping"}`); code != 0 || res == nil {
		t.Fatalf("ping before initialize: code %d", code)
	}
	if code, res := ask(`{"jsonrpc":"2.0","id":3,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`); code != 0 || res == nil {
		t.Fatalf("initialize: code %d", code)
	}
	if code, res := ask(`{"jsonrpc":"2.0","id":4,"method":"tools/list","params":{}}`); code != 0 || res == nil {
		t.Fatalf("tools/list after initialize: code %d", code)
	}
}
