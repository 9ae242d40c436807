package schema

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/access"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/tools/mcpbus/stack"
)

// driveRetry makes a server ask for input during a /mcp call of protocol
// 2026-07-28 (the test server's ask tool elicits) and sends the client's
// retry to a second gateway instance, which passes it to the one holding
// the call over mcp.v1.gateway.retry.<instance>.
func driveRetry(t *testing.T, ctx context.Context, sys *stack.Stack, server string) {
	t.Helper()
	key, err := os.ReadFile(sys.Gateway.AdminKeyPath())
	if err != nil {
		t.Fatalf("reading the admin key: %v", err)
	}
	nc, err := sys.ConnectAs("schema-gateway-2", access.Gateway)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	// The first one's data dir: its admin key, no second one made.
	g2, err := gateway.New(ctx, nc, gateway.Options{Addr: "127.0.0.1:0", DataDir: filepath.Dir(sys.Gateway.AdminKeyPath()),
		Logger: slog.New(slog.DiscardHandler), ShutdownTimeout: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g2.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("the second gateway did not stop")
		}
	})

	tool := server + "__ask"
	call := func(addr, params string) map[string]json.RawMessage {
		t.Helper()
		meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}`
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{%s,%s}}`, meta, params)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/mcp", bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
			"Authorization": "Bearer " + strings.TrimSpace(string(key)), "Mcp-Protocol-Version": "2026-07-28",
			"Mcp-Method": "tools/call", "Mcp-Name": tool} {
			req.Header.Set(k, v)
		}
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			t.Fatalf("tools/call on %s: %v", addr, err)
		}
		data, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		msg := string(data)
		if i := strings.Index(msg, "data: "); i >= 0 { // an event stream: its first message
			msg, _, _ = strings.Cut(msg[i+len("data: "):], "\n")
		}
		var out struct {
			Result map[string]json.RawMessage `json:"result"`
			Error  json.RawMessage            `json:"error"`
		}
		if err := json.Unmarshal([]byte(msg), &out); err != nil || out.Error != nil {
			t.Fatalf("tools/call on %s: HTTP %d %s", addr, resp.StatusCode, data)
		}
		return out.Result
	}
	first := call(sys.Gateway.Addr(), fmt.Sprintf(`"name":%q,"arguments":{"message":"Your name?"}`, tool))
	var requests map[string]json.RawMessage
	var state string
	if json.Unmarshal(first["inputRequests"], &requests) != nil || len(requests) != 1 || json.Unmarshal(first["requestState"], &state) != nil {
		t.Fatalf("first round of %s: %v", tool, first)
	}
	var answers []string
	for id := range requests {
		answers = append(answers, fmt.Sprintf(`%q:{"action":"accept","content":{"name":"Ada"}}`, id))
	}
	final := call(g2.Addr(), fmt.Sprintf(`"name":%q,"arguments":{"message":"Your name?"},"requestState":%q,"inputResponses":{%s}`,
		tool, state, strings.Join(answers, ",")))
	if !strings.Contains(string(final["content"]), "hello Ada") {
		t.Fatalf("the retry on the second instance: %v", final)
	}
}
