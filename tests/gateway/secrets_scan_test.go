package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/gateway/rest"
)

// Secrets in tool arguments are blocked at the runner whichever front door
// a call takes (/mcp and /mcp/invoke): an AWS key, a GitHub token and a
// stored secret of another server; a result carrying one is redacted. The
// answer names the rule; no value is in the stack's log.
func TestSecretsBlockedThroughTheGateway(t *testing.T) {
	t.Parallel()
	const (
		awsKey      = "AKIAZ3MQXP7R2HKW5Y4N"
		githubToken = "ghp_R7dK2mQx9LpV4sTz8NwB3yHc6JfG1aEu5XoP"
		stored      = "vault-stored-value-5k2x" // a stored secret of server vault
	)
	e := start(t)
	vault := model.McpConfig{Name: "vault", Enabled: true,
		Package:   model.Package{Type: model.PackageBinary, Identifier: testServer},
		Transport: model.Transport{Type: model.TransportStdio},
		EnvVars:   map[string]model.EnvVar{"TOKEN": {IsSecret: true}},
	}
	alpha := model.McpConfig{Name: "alpha", Enabled: true,
		Package:   model.Package{Type: model.PackageBinary, Identifier: testServer},
		Transport: model.Transport{Type: model.TransportStdio},
	}
	for _, c := range []model.McpConfig{vault, alpha} {
		if r := e.do("POST", "/api/v1/servers", model.ConfigCreateRequest{Config: c}); r.status != http.StatusCreated {
			t.Fatalf("create %s: %d %s", c.Name, r.status, r.body)
		}
	}
	if r := e.do("PUT", "/api/v1/servers/vault/credentials", model.Credentials{Env: map[string]string{"TOKEN": stored}}); r.status != http.StatusOK {
		t.Fatalf("credentials: %d %s", r.status, r.body)
	}
	e.waitState("alpha", model.StateRunning)
	invoke := func(tool, args string) rest.InvokeReply {
		t.Helper()
		r := e.do("POST", "/mcp/invoke", rest.InvokeRequest{ToolName: tool, Params: json.RawMessage(args)})
		var inv rest.InvokeReply
		r.decode(t, &inv)
		return inv
	}
	// The vault server runs with its secret (the credential put restarts it).
	sum := sha256.Sum256([]byte(stored))
	deadline := time.Now().Add(30 * time.Second)
	for {
		e.waitState("vault", model.StateRunning)
		if inv := invoke("vault__env_sha256", `{"name":"TOKEN"}`); strings.Contains(string(inv.Result), hex.EncodeToString(sum[:])) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the vault server never got its secret")
		}
		time.Sleep(100 * time.Millisecond)
	}

	s := connectMCP(t, e.url, e.admin)
	for _, c := range []struct{ name, value, rule string }{
		{"aws key", "key " + awsKey, "aws-access-token"},
		{"github token", githubToken, "github-pat"},
		{"another server's secret", stored, "mcpbus-known-secret"},
	} {
		args := `{"message":"` + c.value + `"}`
		inv := invoke("alpha__echo", args)
		if inv.Success || !strings.Contains(string(inv.Result)+inv.Error, "rule "+c.rule) || strings.Contains(string(inv.Result)+inv.Error, c.value) {
			t.Errorf("/mcp/invoke %s: %+v, want a refusal naming %s", c.name, inv, c.rule)
		}
		res, err := s.CallTool(ctxT(t, 30*time.Second), &mcp.CallToolParams{Name: "alpha__echo", Arguments: json.RawMessage(args)})
		if err != nil {
			t.Fatalf("/mcp %s: %v", c.name, err)
		}
		txt := res.Content[0].(*mcp.TextContent).Text
		if !res.IsError || !strings.Contains(txt, "rule "+c.rule) || strings.Contains(txt, c.value) {
			t.Errorf("/mcp %s: isError=%v %q, want a refusal naming %s", c.name, res.IsError, txt, c.rule)
		}
	}
	// A result carrying a secret is redacted (the default for results).
	res, err := s.CallTool(ctxT(t, 30*time.Second), &mcp.CallToolParams{Name: "vault__env", Arguments: map[string]any{"name": "TOKEN"}})
	if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "[REDACTED:mcpbus-known-secret]" {
		t.Fatalf("/mcp result: %+v %v", res, err)
	}
	if inv := invoke("vault__env", `{"name":"TOKEN"}`); !inv.Success || !strings.Contains(string(inv.Result), "[REDACTED:mcpbus-known-secret]") {
		t.Fatalf("/mcp/invoke result: %+v", inv)
	}
	logs := e.logs.String()
	for _, v := range []string{awsKey, githubToken, stored} {
		if strings.Contains(logs, v) {
			t.Errorf("the stack's log holds a secret value %s", v)
		}
	}
	if !strings.Contains(logs, `"rule":"mcpbus-known-secret"`) {
		t.Error("the log does not name the rule")
	}
}
