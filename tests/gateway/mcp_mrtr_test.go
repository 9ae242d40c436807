package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/access"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
)

// The whole system as `mcpbus up` runs it (authenticated bus, real API
// keys): a go-sdk client of protocol 2026-07-28 answers a server's
// elicitation through /mcp, and a raw client's retry that lands on a second
// gateway instance is passed over the bus, with the gateway identity's
// permissions, to the instance holding the call.
func TestMCPMultiRoundTrip(t *testing.T) {
	t.Parallel()
	e := startMCP(t, gateway.Options{})
	slug := e.enable(t, testServerConfig("asker"))
	tool := slug + "__ask"

	mc := mcp.NewClient(&mcp.Implementation{Name: "asking", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Grace"}}, nil
		},
	})
	tr := &mcp.StreamableClientTransport{Endpoint: e.url + "/mcp", MaxRetries: -1,
		HTTPClient: &http.Client{Transport: &authTransport{key: e.admin, base: http.DefaultTransport}}}
	cs, err := mc.Connect(ctxT(t, 30*time.Second), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctxT(t, 30*time.Second), &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"message": "Your name?"}})
	if err != nil {
		t.Fatal(err)
	}
	if tc, ok := res.Content[0].(*mcp.TextContent); !ok || tc.Text != "hello Grace" {
		t.Fatalf("ask through /mcp = %+v", res.Content)
	}

	// A second gateway instance on the same bus, as the gateway identity.
	nc, err := e.st.ConnectAs("test-gateway-2", access.Gateway)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g2, err := gateway.New(ctx, nc, gateway.Options{Addr: "127.0.0.1:0", DataDir: t.TempDir(),
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

	call := func(url, params string) map[string]json.RawMessage {
		t.Helper()
		meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}`
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{%s,%s}}`, meta, params)
		r := rawDo(t, http.MethodPost, url+"/mcp", body, map[string]string{
			"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
			"Authorization": "Bearer " + e.admin, "Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": tool,
		})
		data := string(r.body)
		if i := strings.Index(data, "data: "); i >= 0 { // an event stream: its first message
			data, _, _ = strings.Cut(data[i+len("data: "):], "\n")
		}
		var msg struct {
			Result map[string]json.RawMessage `json:"result"`
			Error  json.RawMessage            `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &msg); err != nil || msg.Error != nil {
			t.Fatalf("tools/call on %s: HTTP %d %s", url, r.status, r.body)
		}
		return msg.Result
	}
	first := call(e.url, fmt.Sprintf(`"name":%q,"arguments":{"message":"Your name?"}`, tool))
	var requests map[string]json.RawMessage
	var state string
	if json.Unmarshal(first["inputRequests"], &requests) != nil || len(requests) != 1 || json.Unmarshal(first["requestState"], &state) != nil {
		t.Fatalf("first round: %v", first)
	}
	var answers []string
	for id := range requests {
		answers = append(answers, fmt.Sprintf(`%q:{"action":"accept","content":{"name":"Ada"}}`, id))
	}
	final := call("http://"+g2.Addr(), fmt.Sprintf(`"name":%q,"arguments":{"message":"Your name?"},"requestState":%q,"inputResponses":{%s}`,
		tool, state, strings.Join(answers, ",")))
	if !strings.Contains(string(final["content"]), "hello Ada") {
		t.Fatalf("retry on the second instance: %v", final)
	}
}
